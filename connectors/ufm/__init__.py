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
    UfmUnreachable,
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
    "UfmUnreachable",
    "to_fabric",
]
