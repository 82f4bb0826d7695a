"""Many reads of one uncached descriptor sent to the kernel in one call and waited for together
(Linux's native AIO: io_submit / io_getevents, called through ctypes like the other kernel calls).

Why not threads: a layer's misses are a few dozen small reads. Read by a pool of Python threads,
each read needs the GIL before it goes out and again after it lands, and the decode thread's own
bookkeeping holds the GIL in between, so the reads left one by one and the disk sat idle for much
of the wait (docs/decisions.md). Sent in one call, every read is at the disk at once, and the
thread that sent them can go on with its Python work until it waits.

Only for descriptors opened with ``O_DIRECT`` (on a buffered one the kernel reads synchronously
inside io_submit). Where the calls are missing (macOS, a kernel or sandbox without AIO),
``BatchReader.open`` answers None and the caller reads with its threads as before;
``SHARDSCOPE_BATCH_READS=0`` asks for that on Linux too (the A/B in docs/decisions.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import platform
import threading

from shardscope.engine.base.platform_calls import IS_LINUX

# io_setup, io_destroy, io_submit, io_getevents: the two tables Linux has for the machines it runs on
_SYSCALLS = {"x86_64": (206, 207, 209, 208), "aarch64": (0, 1, 2, 4), "arm64": (0, 1, 2, 4)}
_IOCB_CMD_PREAD = 0
DEPTH = 256  # reads one context keeps at the kernel (a larger batch goes out as earlier ones land)


class _Iocb(ctypes.Structure):  # struct iocb, little-endian (x86_64 and arm64 alike)
    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32), ("rw_flags", ctypes.c_int32),
                ("opcode", ctypes.c_uint16), ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("offset", ctypes.c_int64),
                ("reserved2", ctypes.c_uint64), ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]


class _Event(ctypes.Structure):  # struct io_event
    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_NUMBERS = _SYSCALLS.get(platform.machine()) if IS_LINUX else None


def _call(number: int, *args) -> int:
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]  # a variadic int is only 32 bits
    while True:
        result = _libc.syscall(ctypes.c_long(number), *args)
        if result >= 0:
            return result
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err))


class Pending:
    """Reads sent and not yet waited for: ``wait`` returns the bytes read (short only past the end
    of the file) or raises the first read's error, after every read has landed."""

    def __init__(self, reader: "BatchReader", reads: list[tuple[int, int, int]]):
        self._reader = reader
        self._reads = reads
        self._done = [0] * len(reads)
        self._sent = 0
        self._landed = 0
        self._error: OSError | None = None
        self._ctx = reader._context()
        self._iocbs = (_Iocb * len(reads))()  # kept alive until every read has landed
        self._events = (_Event * min(DEPTH, max(1, len(reads))))()
        for i, (address, length, offset) in enumerate(reads):
            cb = self._iocbs[i]
            cb.data, cb.opcode, cb.fildes = i, _IOCB_CMD_PREAD, reader.fd
            cb.buf, cb.nbytes, cb.offset = address, length, offset
        self._send()

    def _send(self) -> None:
        n = min(len(self._reads), self._landed + DEPTH) - self._sent
        if n <= 0:
            return
        pointers = (ctypes.c_void_p * n)(*[ctypes.addressof(self._iocbs[self._sent + i]) for i in range(n)])
        sent = _call(_NUMBERS[2], self._ctx, n, pointers)
        if sent == 0:
            raise OSError(errno.EAGAIN, "io_submit took no read")
        self._sent += sent

    def wait(self) -> int:
        while self._landed < len(self._reads):
            want = self._sent - self._landed
            got = _call(_NUMBERS[3], self._ctx, want, want, self._events, None)  # blocks without the GIL
            for event in self._events[:got]:
                i = event.data
                if event.res < 0 and self._error is None:
                    self._error = OSError(-event.res, f"read of {self._reader.path} at byte {self._reads[i][2]} "
                                                      f"failed ({os.strerror(-event.res)})")
                self._done[i] = max(0, event.res)
            self._landed += got
            if self._error is None and self._sent < len(self._reads):
                try:
                    self._send()
                except OSError as exc:  # what went out still lands before the error is raised
                    self._error = exc
                    self._reads = self._reads[:self._sent]
        if self._error is not None:
            raise self._error
        return sum(self._finish(i) for i in range(len(self._reads)))

    def _finish(self, i: int) -> int:
        """A read the kernel cut short before the end of the file is finished here, by preadv."""
        address, length, offset = self._reads[i]
        done = self._done[i]
        while done < length and offset + done < self._reader.size:
            view = memoryview((ctypes.c_char * (length - done)).from_address(address + done)).cast("B")
            try:
                n = os.preadv(self._reader.fd, [view], offset + done)
            finally:
                view.release()
            if n <= 0:
                raise OSError(errno.EIO, f"read of {self._reader.path} stopped at byte {offset + done}")
            done += n
        return done


class BatchReader:
    """Reads of one ``O_DIRECT`` descriptor, each thread through a context of its own (a batch's
    events must not land in another thread's wait)."""

    def __init__(self, fd: int, path: str, size: int):
        self.fd, self.path, self.size = fd, path, size
        self._local = threading.local()
        self._contexts: list[ctypes.c_ulong] = []
        self._lock = threading.Lock()

    @classmethod
    def open(cls, fd: int, path: str, size: int) -> "BatchReader | None":
        """A reader, or None where this system takes no batches (the caller's threads read)."""
        if _NUMBERS is None or os.environ.get("SHARDSCOPE_BATCH_READS", "1") == "0":
            return None
        reader = cls(fd, path, size)
        page = mmap.mmap(-1, mmap.PAGESIZE)
        try:  # one real read: a filesystem may take the descriptor and refuse its batches
            reader.send([(ctypes.addressof(ctypes.c_char.from_buffer(page)), mmap.PAGESIZE, 0)]).wait()
        except OSError:
            reader.close()
            return None
        finally:
            page.close()
        return reader

    def _context(self) -> ctypes.c_ulong:
        ctx = getattr(self._local, "ctx", None)
        if ctx is None or self._local.pid != os.getpid():  # a context is its process's: not a fork's
            ctx = ctypes.c_ulong(0)
            _call(_NUMBERS[0], DEPTH, ctypes.byref(ctx))
            with self._lock:
                self._contexts.append(ctx)
            self._local.ctx, self._local.pid = ctx, os.getpid()
        return ctx

    def send(self, reads: list[tuple[int, int, int]]) -> Pending:
        """Send (address, length, file offset) reads — page-aligned, as ``O_DIRECT`` wants — and return
        at once; ``wait`` on the answer before touching the memory or sending on this thread again."""
        return Pending(self, reads)

    def close(self) -> None:
        with self._lock:
            for ctx in self._contexts:
                _libc.syscall(_NUMBERS[1], ctx)
            self._contexts.clear()
        self._local = threading.local()


__all__ = ["BatchReader", "Pending", "DEPTH"]
