"""Reading a checkpoint without running code from it (issue #36, item 3).

A DCP checkpoint (``torch.distributed.checkpoint``) is a folder: ``.metadata``, a pickle of DCP's own
classes (every tensor's global shape and where its pieces lie), and shard files ``__R_0.distcp``.
PyTorch's ``FileSystemReader.read_metadata`` reads ``.metadata`` with plain ``pickle.load``, and its
``DefaultLoadPlanner.load_bytes`` reads a non-tensor item with ``torch.load(weights_only=False)``: a
crafted folder can run any code the moment it is read. minipar never does either:

- :class:`SafeFileSystemReader` unpickles ``.metadata`` with :class:`MetadataUnpickler`, which admits
  only the classes a DCP metadata file is made of (:data:`ALLOWED`, read off a real checkpoint:
  DCP's metadata dataclasses, ``torch.Size``, dtypes, layouts, memory formats, paths); any other
  global raises :class:`pickle.UnpicklingError` naming it;
- :class:`SafeLoadPlanner` reads a non-tensor item with ``torch.load(weights_only=True)`` (tensors are
  read by DCP with ``weights_only=True`` already).

Every place minipar reads a checkpoint goes through these (:func:`minipar.checkpoint.dcp.load`,
:func:`minipar.checkpoint.resume.damage`), so a crafted checkpoint is reported as damaged, never run.
"""

from __future__ import annotations

import io
import pickle

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element  # DCP's own helper, as its planner uses
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

_DCP_METADATA = "torch.distributed.checkpoint.metadata"
ALLOWED = {
    _DCP_METADATA: {
        "Metadata",
        "MetadataIndex",
        "ChunkStorageMetadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "TensorProperties",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset"},
}


class MetadataUnpickler(pickle.Unpickler):
    """A ``pickle.Unpickler`` that resolves only :data:`ALLOWED` names and ``torch`` dtypes.

    Raises:
        pickle.UnpicklingError: any other global (a function to call, a class to build), named.
    """

    def find_class(self, module: str, name: str):
        if name in ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a DCP checkpoint's metadata (refused)")


def read_metadata_file(path: str) -> Metadata:
    """The DCP ``Metadata`` in file ``path`` (a checkpoint's ``.metadata``), read by :class:`MetadataUnpickler`.

    Raises:
        pickle.UnpicklingError: a name outside :data:`ALLOWED`, or a file that is not a pickle;
        TypeError: a pickle of allowed names that is not a ``Metadata``; OSError: unreadable.
    """
    with open(path, "rb") as f:
        meta = MetadataUnpickler(f).load()
    if not isinstance(meta, Metadata):
        raise TypeError(f"{path} holds a {type(meta).__name__}, not DCP's Metadata")
    return meta


class SafeFileSystemReader(FileSystemReader):
    """DCP's ``FileSystemReader`` whose ``.metadata`` is read by :func:`read_metadata_file` (no code runs)."""

    def read_metadata(self, *args, **kwargs) -> Metadata:
        meta = read_metadata_file(str(self._get_metadata_path(kwargs.get("rank"))))
        if getattr(meta, "storage_meta", None) is None:
            meta.storage_meta = StorageMeta()
        meta.storage_meta.load_id = self.load_id
        return meta


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's ``DefaultLoadPlanner`` that reads a non-tensor item with ``torch.load(weights_only=True)``."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj
