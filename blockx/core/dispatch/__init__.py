"""The Worker-global call dispatcher: a Sans-IO scheduler of function calls
over the attached executors.

One module per part, each opening with the rules of the state it owns;
``dispatcher.DispatcherCore`` builds them in dependency order:

  types      inputs (call specs, retry policy, executor snapshots) and the
             error-kind / rejection strings shared with the adapter
  config     DispatcherConfig and its validation rules
  commands   the commands the dispatcher returns to the adapter
  records    the records per call, task, batch, fairness group and executor;
             the call states and their one guarded setter
  calls      CallTable: calls by id
  fairness   TaskScheduler: which task admits next (instance fairness)
  executors  ExecutorTable: executor views and records, Filter -> Score
  tasks      TaskCallTable: per-task call state, batches, dirty set,
             flush/settle/converge, cancel
  subcalls   SubcallBinder: subcall checks, binding beside the parent, parking
  retry      RetryScheduler: backoff with jitter, ArmCallRetry
  intake     CallIntake: prepare/commit of call phases and stream batches
  lifecycle  CallLifecycle: every call event (the handle_* methods)
  dispatcher DispatcherCore: builds the parts and exposes them

This package imports only blockx._fast itself, so a part can be imported alone:
that installs, under BLOCKX_NO_EXTENSIONS=1, the finder that loads the parts
written in Cython's pure-Python mode (records, commands, fairness, lifecycle,
subcalls, reservations) from their .py source rather than from their compiled extension.
"""
import blockx._fast  # noqa: F401  (the extension switch, before any part is imported)
