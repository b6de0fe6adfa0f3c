"""``nvidia-smi topo -m``: the parser of one node's capture (the matrix model is ``core.affinity``)."""

from connectors.gpu_topo.parser import (
    MAX_BYTES,
    MAX_DEVICES,
    MAX_LINE,
    SOURCE,
    GpuTopoError,
    decode,
    parse_file,
    parse_gpu_topo,
)

__all__ = ["MAX_BYTES", "MAX_DEVICES", "MAX_LINE", "SOURCE", "GpuTopoError", "decode", "parse_file", "parse_gpu_topo"]
