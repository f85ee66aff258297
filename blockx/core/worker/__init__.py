"""WorkerCore and the parts it is made of: the Sans-IO state machine of the
Worker's slots, task index, timers and fair shares (core.py holds WorkerCore;
each other module one part it composes). Nothing is re-exported here: a caller
imports WorkerCore from blockx.core.worker.core, so loading one part never
loads the whole core."""
