# cython: always_allow_keywords=False
# A task's FIFO of ready calls (compiled; twin: readyqueue_py.py).
#
# Retries go to the front (push_front) so a call that lost its executor keeps
# its place ahead of calls that never ran. Storage is a ring buffer over a
# Python list rather than a C array of PyObject*: list slots are visible to the
# cyclic GC (call contexts often point back at the task that owns the queue),
# and with boundscheck/wraparound off the indexing compiles to direct slot
# access, so push/pop/push_front are O(1) with no per-item allocation. Capacity
# doubles when full and drops back to the initial size when the queue empties
# after a burst, so an idle task does not pin a large buffer.
# Iteration works on a snapshot, so callers may remove/push while iterating.

cimport cython

cdef enum:
    _INITIAL = 8          # power of two
    _SHRINK_ABOVE = 1024  # capacity kept when emptied; larger buffers are released


@cython.final
cdef class ReadyQueue:

    def __cinit__(self):
        self._buf = [None] * _INITIAL
        self._head = 0
        self._count = 0
        self._mask = _INITIAL - 1

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = self._mask + 1
        cdef list buf = self._buf
        # Unroll the ring so the front lands at index 0 of the new storage.
        self._buf = buf[self._head:] + buf[:self._head] + [None] * cap
        self._head = 0
        self._mask = 2 * cap - 1
        return 0

    cdef int _reset(self) except -1:
        self._buf = [None] * _INITIAL
        self._head = 0
        self._count = 0
        self._mask = _INITIAL - 1
        return 0

    cdef inline int push_c(self, object item) except -1:
        if self._count > self._mask:
            self._grow()
        self._buf[(self._head + self._count) & self._mask] = item
        self._count += 1
        return 0

    cdef inline int push_front_c(self, object item) except -1:
        if self._count > self._mask:
            self._grow()
        self._head = (self._head - 1) & self._mask
        self._buf[self._head] = item
        self._count += 1
        return 0

    cdef inline object pop_c(self):
        if self._count == 0:
            raise IndexError("pop from an empty ReadyQueue")
        cdef Py_ssize_t h = self._head
        item = self._buf[h]
        self._buf[h] = None
        self._head = (h + 1) & self._mask
        self._count -= 1
        if self._count == 0:
            if self._mask >= _SHRINK_ABOVE:
                self._reset()
            else:
                self._head = 0
        return item

    def push(self, item) -> None:
        self.push_c(item)

    def push_front(self, item) -> None:
        self.push_front_c(item)

    def pop(self):
        """Remove and return the front item; IndexError when empty."""
        return self.pop_c()

    def peek(self):
        """The front item, or None when empty."""
        if self._count == 0:
            return None
        return self._buf[self._head]

    def __len__(self):
        return self._count

    def __bool__(self):
        return self._count != 0

    cdef list _snapshot(self):
        cdef Py_ssize_t k
        cdef list out = []
        for k in range(self._count):
            out.append(self._buf[(self._head + k) & self._mask])
        return out

    def __iter__(self):
        return iter(self._snapshot())

    def clear(self) -> None:
        self._reset()

    def drain(self) -> list:
        """All items front to back; the queue is empty afterwards."""
        cdef list out = self._snapshot()
        self._reset()
        return out

    def remove(self, item) -> bool:
        """Remove the first occurrence of item (identity, then ==, like
        list.remove); False when absent. O(n): a rare path (cancellation)."""
        cdef Py_ssize_t k = 0, j
        cdef object x
        while k < self._count:
            x = self._buf[(self._head + k) & self._mask]
            # Fields are re-read after the comparison: a user __eq__ may
            # have mutated the queue.
            if x is item or x == item:
                if k >= self._count:
                    return False
                for j in range(k, self._count - 1):
                    self._buf[(self._head + j) & self._mask] = \
                        self._buf[(self._head + j + 1) & self._mask]
                self._buf[(self._head + self._count - 1) & self._mask] = None
                self._count -= 1
                if self._count == 0:
                    self._head = 0
                return True
            k += 1
        return False

    def __repr__(self):
        return f"<ReadyQueue len={self._count}>"
