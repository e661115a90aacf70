"""RFC 6962 / RFC 9162 Merkle trees over record hashes: roots, compact ranges and proofs.

Pure functions. Proof generation takes a `subtree_root(lo, hi)` callable so that the caller
decides where leaves come from (a list in tests, the segment files in the log).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from .errors import InvalidProof

EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256

SubtreeRoot = Callable[[int, int], bytes]


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two strictly smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class CompactRange:
    """The perfect-subtree roots covering leaves [0, size), largest first.

    Appending a leaf costs one hash per carried level (about one on average), and the root of
    the whole range folds the stack from the right.
    """

    __slots__ = ("_sizes", "_hashes", "size")

    def __init__(self) -> None:
        self._sizes: list[int] = []
        self._hashes: list[bytes] = []
        self.size = 0

    def copy(self) -> CompactRange:
        other = CompactRange()
        other._sizes = self._sizes.copy()
        other._hashes = self._hashes.copy()
        other.size = self.size
        return other

    def append(self, leaf: bytes) -> None:
        # append_subtree(1, leaf) without its alignment check and list shuffling: merge while
        # the last subtree is as large as the one being carried.
        sizes, hashes = self._sizes, self._hashes
        size = 1
        while sizes and sizes[-1] == size:
            sizes.pop()
            leaf = _sha256(b"\x01" + hashes.pop() + leaf).digest()
            size <<= 1
        sizes.append(size)
        hashes.append(leaf)
        self.size += 1

    def append_subtree(self, size: int, root: bytes) -> None:
        """Append a perfect subtree of `size` leaves; it must be aligned at `self.size`."""
        if size & (size - 1) or self.size % size:
            raise ValueError(f"a subtree of {size} leaves is not aligned at {self.size}")
        sizes, hashes = self._sizes, self._hashes
        sizes.append(size)
        hashes.append(root)
        while len(sizes) > 1 and sizes[-1] == sizes[-2]:
            right = hashes.pop()
            sizes.pop()
            hashes[-1] = _sha256(b"\x01" + hashes[-1] + right).digest()
            sizes[-1] *= 2
        self.size += size

    def tail(self, start: int) -> CompactRange:
        """The compact range of leaves [start, size) alone, as if they were leaves 0 onwards.

        `start` must begin one of this range's subtrees (a segment's first leaf is one while the
        segment is not full), so the tail is made of this range's last subtrees, unchanged."""
        sizes, hashes = self._sizes, self._hashes
        count, covered = 0, self.size - start
        while covered > 0 and count < len(sizes):
            count += 1
            covered -= sizes[-count]
        if covered != 0:
            raise ValueError(f"leaf {start} does not begin a subtree of a range of {self.size}")
        other = CompactRange()
        if count:
            other._sizes, other._hashes = sizes[-count:], hashes[-count:]
        other.size = self.size - start
        return other

    def root(self) -> bytes:
        if not self._hashes:
            return EMPTY_ROOT
        hashes = self._hashes
        result = hashes[-1]
        for index in range(len(hashes) - 2, -1, -1):
            result = _sha256(b"\x01" + hashes[index] + result).digest()
        return result


def root(leaves: Sequence[bytes]) -> bytes:
    compact = CompactRange()
    for leaf in leaves:
        compact.append(leaf)
    return compact.root()


def list_subtree_root(leaves: Sequence[bytes]) -> SubtreeRoot:
    return lambda lo, hi: root(leaves[lo:hi])


def inclusion_proof(index: int, size: int, subtree_root: SubtreeRoot) -> list[bytes]:
    """RFC 9162 section 2.1.3.1: the audit path of leaf `index` in the tree of `size` leaves."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = split_point(hi - lo)
        if index < lo + k:
            path.append(subtree_root(lo + k, hi))
            hi = lo + k
        else:
            path.append(subtree_root(lo, lo + k))
            lo = lo + k
    path.reverse()
    return path


def consistency_proof(first: int, second: int, subtree_root: SubtreeRoot) -> list[bytes]:
    """RFC 9162 section 2.1.4.1: proof that the tree of `first` leaves prefixes `second`."""
    if not 0 <= first <= second:
        raise ValueError(f"no consistency proof from size {first} to size {second}")
    if first == 0 or first == second:
        return []
    path: list[bytes] = []
    lo, hi, m, whole = 0, second, first, True
    while m != hi - lo:
        k = split_point(hi - lo)
        if m <= k:
            path.append(subtree_root(lo + k, hi))
            hi = lo + k
        else:
            path.append(subtree_root(lo, lo + k))
            lo, m, whole = lo + k, m - k, False
    if not whole:
        path.append(subtree_root(lo, hi))
    path.reverse()
    return path


def verify_inclusion(
    index: int, size: int, leaf: bytes, path: Sequence[bytes], root_: bytes
) -> None:
    """RFC 9162 section 2.1.3.2. Raises InvalidProof."""
    if not 0 <= index < size:
        raise InvalidProof(f"leaf {index} is not in a tree of {size} leaves")
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            raise InvalidProof("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise InvalidProof("inclusion proof is shorter than the tree is deep")
    if r != root_:
        raise InvalidProof(
            f"inclusion proof of leaf {index} does not lead to the root of size {size}"
        )


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, path: Sequence[bytes]
) -> None:
    """RFC 9162 section 2.1.4.2. Raises InvalidProof."""
    if not 0 <= first <= second:
        raise InvalidProof(f"size {first} cannot be a prefix of size {second}")
    if first == second:
        if path:
            raise InvalidProof("a proof between equal sizes must be empty")
        if first_root != second_root:
            raise InvalidProof(f"two different roots for size {first}")
        return
    if first == 0:
        if path:
            raise InvalidProof("a proof from the empty tree must be empty")
        return
    if not path:
        raise InvalidProof("consistency proof is empty")
    nodes = list(path)
    if first & (first - 1) == 0:
        nodes.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = nodes[0]
    for c in nodes[1:]:
        if sn == 0:
            raise InvalidProof("consistency proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise InvalidProof("consistency proof is shorter than the tree is deep")
    if fr != first_root or sr != second_root:
        raise InvalidProof(f"tree of size {first} is not a prefix of the tree of size {second}")
