"""The site configuration file, ``gpufabric.yaml``, read into validated pydantic models.

Why this module is more than ``Settings.model_validate(yaml.safe_load(...))``:

* Operators edit this file by hand, so every problem must come back as one plain sentence that
  names the file, the line and the field (``gpufabric.yaml:14: sources.switches[2].snmp.community:
  ...``), all problems at once, never a traceback or a pydantic URL. Pydantic reports a ``loc``
  tuple; we map it back to a line through the composed YAML node graph.
* The file names the real switches and fabric managers, so it is the obvious place for someone to
  paste a password. Secrets are only ever *references* (``{env: VAR}`` / ``{file: PATH}``); an
  inline value is refused, and neither the refusal nor anything else here echoes it.
* The file may come from anywhere (a ConfigMap, a GitOps repo, a typo'd path pointing at a
  binary). Alias bombs, recursive anchors, deep nesting, non-UTF-8 and binary input all end in a
  ``SettingsError`` within bounded time and memory: we compose the YAML ourselves from the
  (C-accelerated) event stream and count what aliases would expand to before anything walks it.
* A thousand switches should not repeat their credentials: ``sources.switch_defaults`` is merged
  into every switch before validation, and ``sources.collection`` supplies SNMP timeouts.

Nothing here resolves secrets or touches the network at load time: a config can be validated on a
laptop that has none of the production environment variables. ``SecretRef.resolve()`` is called
by the connector that needs the value, at the moment it needs it.
"""

from settings.budget import (
    budget_config_from_settings,
    load_budget_config,
    settlement_policy_from_settings,
)
from settings.errors import (
    INLINE_SECRET_MESSAGE,
    KNOWN_PLATFORMS,
    MAX_FILE_BYTES,
    Platform,
    Problem,
    SecretError,
    SettingsError,
)
from settings.loading import (
    default_settings_path,
    load_settings,
    parse_settings,
)
from settings.models import (
    BudgetReconcilerSettings,
    BudgetSettings,
    BudgetSettlementSettings,
    CollectionSettings,
    DcgmExporterSource,
    DcimSource,
    EnvelopeDefaults,
    FabricManagerSource,
    KubernetesSource,
    NvlinkSource,
    PrometheusSource,
    PublishSettings,
    RateCard,
    SecretRef,
    Settings,
    SnmpConfig,
    SnmpDefaults,
    Sources,
    SshConfig,
    SshDefaults,
    Switch,
    SwitchDefaults,
    Tenant,
    WarehouseSettings,
)

__all__ = [
    "INLINE_SECRET_MESSAGE",
    "KNOWN_PLATFORMS",
    "MAX_FILE_BYTES",
    "BudgetReconcilerSettings",
    "BudgetSettings",
    "BudgetSettlementSettings",
    "CollectionSettings",
    "DcgmExporterSource",
    "DcimSource",
    "EnvelopeDefaults",
    "FabricManagerSource",
    "KubernetesSource",
    "NvlinkSource",
    "Platform",
    "Problem",
    "PrometheusSource",
    "PublishSettings",
    "RateCard",
    "SecretError",
    "SecretRef",
    "Settings",
    "SettingsError",
    "SnmpConfig",
    "SnmpDefaults",
    "Sources",
    "SshConfig",
    "SshDefaults",
    "Switch",
    "SwitchDefaults",
    "Tenant",
    "WarehouseSettings",
    "budget_config_from_settings",
    "default_settings_path",
    "load_budget_config",
    "load_settings",
    "parse_settings",
    "settlement_policy_from_settings",
]
