"""NVIDIA UFM REST: client and conversion to the shared InfiniBand records."""

from connectors.ufm.client import (
    UfmAuthError,
    UfmBadResponse,
    UfmClient,
    UfmConfig,
    UfmError,
    UfmFabric,
    UfmNotFound,
    UfmTimeout,
    UfmTlsError,
    UfmUnreachable,
    decode_body,
    rows_of,
)
from connectors.ufm.parser import SOURCE, to_fabric

__all__ = [
    "SOURCE",
    "UfmAuthError",
    "UfmBadResponse",
    "UfmClient",
    "UfmConfig",
    "UfmError",
    "UfmFabric",
    "UfmNotFound",
    "UfmTimeout",
    "UfmTlsError",
    "UfmUnreachable",
    "decode_body",
    "rows_of",
    "to_fabric",
]
