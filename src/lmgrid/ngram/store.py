"""On-disk n-gram tables read and written in slices, so that memory follows the slice, not the table.

A table is a 1-d array on disk: a member of an uncompressed `.npz` (what `np.savez` writes: each member
is an `.npy` file stored as is inside the zip) or a raw file of one dtype.  Slices are read with plain
file reads, not memory maps: a mapped page that was touched counts in the process's resident set until
the map goes away, a read page stays in the kernel's page cache, which the kernel can drop.
"""
from __future__ import annotations

import os
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write

MIB = 1 << 20


def rows_per_chunk(memory_mb: float, bytes_per_row: int) -> int:
    """How many rows one pass may hold when each row costs `bytes_per_row` with its temporaries."""
    return max(1 << 12, int(memory_mb * MIB) // bytes_per_row)


class Tables:
    """Named 1-d arrays, on disk or in memory (the same code serves both): `size`, `read(name, lo, hi)`,
    `dense(name)`, `search` (binary search in a sorted column), `slices` (a sorted key column in
    slices that keep each context whole)."""

    def __init__(self, arrays: dict[str, np.ndarray] | None = None, step: int | None = None):
        self._where: dict[str, tuple[Path, int, np.dtype, int]] = {}  # name -> path, offset, dtype, size
        self._mem = dict(arrays or {})
        self.step = step  # rows per slice (None: one slice)

    @classmethod
    def npz(cls, path: str | Path) -> "Tables":
        """The members of an `np.savez` file (uncompressed), located without reading their data."""
        t = cls()
        path = Path(path)
        try:
            with zipfile.ZipFile(path) as z, open(path, "rb") as fh:
                for info in z.infolist():
                    if info.compress_type != zipfile.ZIP_STORED:
                        raise LmgridError(f"{path}: member {info.filename} is compressed (expected np.savez)")
                    fh.seek(info.header_offset)
                    local = fh.read(30)  # the local header's name and extra lengths can differ from the central one
                    name_len, extra_len = struct.unpack("<HH", local[26:30])
                    fh.seek(info.header_offset + 30 + name_len + extra_len)
                    version = np.lib.format.read_magic(fh)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, fortran, dtype = read_header(fh)
                    if len(shape) > 1 or fortran:
                        raise LmgridError(f"{path}: member {info.filename} is not a 1-d array")
                    t._where[info.filename.removesuffix(".npy")] = (path, fh.tell(), dtype, int(np.prod(shape)))
        except FileNotFoundError:
            raise LmgridError(f"{path}: file not found") from None
        except (zipfile.BadZipFile, ValueError, struct.error) as e:
            raise LmgridError(f"{path}: not an n-gram table file ({e})") from None
        return t

    def add_raw(self, name: str, path: str | Path, dtype) -> None:
        dtype = np.dtype(dtype)
        self._where[name] = (Path(path), 0, dtype, os.path.getsize(path) // dtype.itemsize)

    def subset(self, names) -> "Tables":
        sub = Tables({n: self._mem[n] for n in names if n in self._mem}, self.step)
        sub._where = {n: self._where[n] for n in names if n in self._where}
        return sub

    def update(self, other: "Tables") -> "Tables":
        self._where.update(other._where)
        self._mem.update(other._mem)
        return self

    def __contains__(self, name: str) -> bool:
        return name in self._where or name in self._mem

    def size(self, name: str) -> int:
        return self._mem[name].size if name in self._mem else self._where[name][3]

    def read(self, name: str, lo: int = 0, hi: int | None = None) -> np.ndarray:
        if name in self._mem:
            return self._mem[name][lo:hi]
        path, offset, dtype, size = self._where[name]
        hi = size if hi is None else min(hi, size)
        lo = min(lo, hi)
        with open(path, "rb") as fh:
            fh.seek(offset + lo * dtype.itemsize)
            out = np.fromfile(fh, dtype=dtype, count=hi - lo)
        if out.size != hi - lo:
            raise LmgridError(f"{path}: {name} is truncated")
        return out

    def dense(self, name: str) -> np.ndarray:
        return self.read(name)

    def search(self, name: str, value: int) -> int:
        """First row of the sorted column `name` whose value is >= `value`."""
        if name in self._mem:
            return int(np.searchsorted(self._mem[name], value))
        lo, hi = 0, self.size(name)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.read(name, mid, mid + 1)[0] < value:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def slices(self, k: int, names: tuple[str, ...], v: int, whole_contexts: bool = True):
        """(lo, {name: rows lo..hi of name+k}) over the order-k table, `keys` first.  With
        `whole_contexts`, a slice never splits the n-grams of one context (key // v)."""
        key, n = f"keys{k}", self.size(f"keys{k}")
        step = self.step or max(n, 1)
        lo = 0
        while lo < n:
            hi = min(lo + step, n)
            keys = self.read(key, lo, hi)
            if whole_contexts and hi < n:
                cut = int(np.searchsorted(keys, keys[-1] // v * v))  # where the last context starts
                if cut == 0:  # one context longer than a slice: take all of it
                    hi = self.search(key, (keys[-1] // v + 1) * v)
                    keys = self.read(key, lo, hi)
                else:
                    hi = lo + cut
                    keys = keys[:cut]
            yield lo, {"keys": keys, **{m: self.read(f"{m}{k}", lo, hi) for m in names if m != "keys"}}
            lo = hi


class Filler:
    """Output columns written in increasing row order, with gaps filled by a default (the rows a pass
    did not reach: contexts without continuations have back-off weight 0): in memory, or appended to
    raw files in `folder`."""

    def __init__(self, folder: str | Path | None = None):
        self.app = Appender(folder) if folder is not None else None
        self.pieces: dict[str, list[np.ndarray]] = {}
        self.done: dict[str, int] = {}

    def put(self, name: str, lo: int, values: np.ndarray, fill: float = 0.0) -> None:
        done = self.done.get(name, 0)
        if lo < done:
            raise AssertionError(f"{name}: rows {lo}.. after {done}")
        parts = ([np.full(lo - done, fill)] if lo > done else []) + [np.asarray(values, dtype=np.float64)]
        for part in parts:
            if self.app is not None:
                self.app.append(name, part)
            else:
                self.pieces.setdefault(name, []).append(part)
        self.done[name] = lo + len(values)

    def dense(self, name: str) -> np.ndarray:
        """A finished column, whole."""
        if self.app is not None:
            self.app.close(name)
            return self.app.tables().dense(name)
        pieces = self.pieces[name]
        self.pieces[name] = [np.concatenate(pieces)] if len(pieces) > 1 else pieces
        return self.pieces[name][0]

    def finish(self, name: str, size: int, fill: float = 0.0) -> None:
        self.put(name, size, np.empty(0), fill)

    def tables(self) -> Tables:
        if self.app is not None:
            return self.app.tables()
        return Tables({name: (np.concatenate(p) if len(p) > 1 else p[0]) for name, p in self.pieces.items()})


class Appender:
    """Raw files in a folder that grow by appending arrays (one file per name)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.dtypes: dict[str, np.dtype] = {}
        self._fh: dict[str, object] = {}

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.bin"

    def append(self, name: str, values: np.ndarray) -> None:
        if name not in self._fh:  # appending again after a close goes on where the file ended
            self._fh[name] = open(self.path(name), "ab" if name in self.dtypes else "wb")
            self.dtypes.setdefault(name, values.dtype)
        np.ascontiguousarray(values, dtype=self.dtypes[name]).tofile(self._fh[name])

    def remove(self, name: str) -> None:
        if name in self._fh:
            self.close(name)
        self.dtypes.pop(name, None)
        self.path(name).unlink(missing_ok=True)

    def close(self, name: str | None = None) -> None:
        for n in [name] if name else list(self._fh):
            if n in self._fh:
                self._fh.pop(n).close()

    def tables(self, into: Tables | None = None) -> Tables:
        """The appended files as `Tables` (closes them)."""
        self.close()
        into = into or Tables()
        for name, dtype in self.dtypes.items():
            into.add_raw(name, self.path(name), dtype)
        return into


def write_npz(path: str | Path, small: dict[str, np.ndarray], raw: dict[str, tuple[Path, np.dtype]]) -> None:
    """An `np.savez`-compatible file of small in-memory arrays and large raw files, copied through in
    blocks (never whole in memory); written atomically."""
    with atomic_write(path, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, arr in small.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as m:
                np.lib.format.write_array(m, np.asanyarray(arr))
        for name, (src, dtype) in raw.items():
            dtype = np.dtype(dtype)
            size = os.path.getsize(src) // dtype.itemsize
            with z.open(f"{name}.npy", "w", force_zip64=True) as m, open(src, "rb") as s:
                np.lib.format.write_array_header_2_0(m, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                         "fortran_order": False, "shape": (size,)})
                shutil.copyfileobj(s, m, 16 * MIB)
