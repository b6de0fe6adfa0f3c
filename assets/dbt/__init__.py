"""The dbt project (``dbt/``) as Dagster assets: staging views and, as issues add them, the marts."""

from assets.dbt.assets import DBT_PROJECT_DIR, defs, ensure_manifest

__all__ = ["DBT_PROJECT_DIR", "defs", "ensure_manifest"]
