"""Writing an ``ExportGraph`` as ONNX or TorchScript bytes, and running those bytes (for ``--check``).

ONNX goes through torch's TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``): it needs only the
``onnx`` package (the dynamo exporter also needs ``onnxscript`` and takes ~10 s here against ~0.5 s), opset 17, the
batch dimension dynamic. The file carries zoo's description of its inputs in its metadata (``metadata_props``:
``zoo``, JSON); a TorchScript file carries the same JSON as the extra file ``zoo.json``.
"""

from __future__ import annotations

import io
import json
import warnings
from typing import Any

import numpy as np
import torch

from ..errors import ZooError

FORMATS = ("onnx", "torchscript")
OPSET = 17
EXTRA_FILE = "zoo.json"
EXPORT_HINT = "pip install 'zoo-rl[export]'"


def _module(name: str, purpose: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        raise ZooError(f"{purpose} needs the {name} package, which is not installed: {EXPORT_HINT}") from None


def graph_bytes(fmt: str, graph: torch.nn.Module, example: list[torch.Tensor], names: list[str],
                metadata: dict[str, Any], outputs: tuple[str, ...] = ("action",)) -> bytes:
    """``graph`` traced on ``example`` (one tensor per input, a batch of 2 or more) as a file of format ``fmt``;
    ``outputs`` names its outputs (a recurrent policy's: the actions and ``state_out``)."""
    graph.eval()
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(graph, tuple(example), check_trace=False)
            buffer = io.BytesIO()
            torch.jit.save(traced, buffer, _extra_files={EXTRA_FILE: json.dumps(metadata)})
        return buffer.getvalue()
    onnx = _module("onnx", "--format onnx")
    buffer = io.BytesIO()
    axes = {name: {0: "batch"} for name in [*names, *outputs]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, tuple(example), buffer, dynamo=False, input_names=names, output_names=list(outputs),
                          dynamic_axes=axes, opset_version=OPSET)
    model = onnx.load_from_string(buffer.getvalue())
    kept = {value.name for value in model.graph.input}
    lost = [name for name in names if name not in kept]
    if lost:  # traced into constants: the actions do not depend on the observations
        raise ValueError(f"the traced graph does not use its input {lost[0]!r} (numpy or Python values inside?)")
    entry = model.metadata_props.add()
    entry.key, entry.value = "zoo", json.dumps(metadata)
    return model.SerializeToString()


class ExportedRunner:
    """Runs an exported file from its bytes: ``runner(arrays) -> actions`` (numpy in, numpy out); with two
    ``outputs`` (a recurrent policy's) ``-> (actions, state_out)``."""

    def __init__(self, fmt: str, data: bytes, names: list[str], outputs: tuple[str, ...] = ("action",)) -> None:
        self.names, self.outputs = names, list(outputs)
        if fmt == "onnx":
            ort = _module("onnxruntime", "--check of an ONNX file (pass --check 0 to skip it)")
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            self._session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
            self._module = None
        else:
            self._session = None
            with warnings.catch_warnings():  # TorchScript is deprecated in favour of torch.export (see the README)
                warnings.simplefilter("ignore", DeprecationWarning)
                self._module = torch.jit.load(io.BytesIO(data))

    def __call__(self, arrays: list[np.ndarray]) -> Any:
        if self._session is not None:
            found = self._session.run(self.outputs, dict(zip(self.names, arrays)))
        else:
            with torch.no_grad():
                out = self._module(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
            found = [x.numpy() for x in out] if isinstance(out, (tuple, list)) else [out.numpy()]
        return found[0] if len(found) == 1 else tuple(found)
