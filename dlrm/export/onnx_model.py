"""ONNX next to the SavedModel (`--onnx`): the same serving function converted by tf2onnx, inputs and
outputs named as in the SavedModel's signature. Variables become constants in one protobuf, which
ONNX caps at 2 GiB: larger models are refused before converting."""
from __future__ import annotations

import tensorflow as tf

from dlrm.export.errors import ExportError
from dlrm.export.inputs import ServingLayout
from dlrm.sizes import format_bytes

ONNX_OPSET = 17
ONNX_LIMIT_BYTES = 2 * 1024**3 - 64 * 1024**2  # the protobuf limit, less room for the graph itself


def check_onnx_size(weight_bytes: int) -> None:
    if weight_bytes > ONNX_LIMIT_BYTES:
        raise ExportError(f"--onnx: the weights need {format_bytes(weight_bytes)}, more than one ONNX file holds "
                          f"({format_bytes(ONNX_LIMIT_BYTES)}); export the SavedModel alone")


def write_onnx(serve: tf.types.experimental.GenericFunction, layout: ServingLayout, path: str) -> None:
    """Convert `serve` (the SavedModel's signature function) to ONNX at `path`."""
    try:
        import tf2onnx
    except ImportError as error:
        raise ExportError(f"--onnx needs tf2onnx and onnxruntime (requirements.txt): {error}") from None
    specs = [tf.TensorSpec(s.shape, s.dtype, name=name) for name, s in layout.specs().items()]

    def positional(*tensors):
        return serve(dict(zip(layout.specs(), tensors)))

    traced = tf.function(positional, input_signature=specs, autograph=False)
    tf2onnx.convert.from_function(traced, input_signature=specs, opset=ONNX_OPSET, output_path=path)
