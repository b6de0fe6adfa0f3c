-- The cost fact summed per UTC hour over the dimensions the query pack groups by (sql/queries):
-- about 40 rows an hour instead of a few thousand lines, so "this month" reads ~30,000 narrow rows
-- however long the fact grows (issue 25, part 4). Sums of exact numerics are exact in any grouping,
-- so every question answers to the last digit as it does straight off the fact
-- (sql/queries/from_fact/, compared by the bench and tests/integration/test_finops_incremental.py).
--
-- Incremental like the fact: a build recomputes the hours from finops_lookback_hours before its
-- own newest hour on (the fact only ever rewrites hours at or after its own newest minus the same
-- lookback, and it is never behind this table), and on a restatement (restate_from/restate_to)
-- the restated hours too; rows are replaced per hour (delete+insert).
{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key=['"ChargePeriodStart"'],
    on_schema_change='fail',
    indexes=[{'columns': ['"ChargePeriodStart"']}],
) }}

{%- set lookback = "interval '" ~ (var('finops_lookback_hours', 3) | int) ~ " hours'" -%}
{%- do finops_check_restate() -%}
{%- set restate_from = var('restate_from', none) -%}
{%- set restate_to = var('restate_to', none) %}

select
    "ChargePeriodStart",
    "x_CostBasis",
    "x_LineType",
    "SubAccountId",
    "x_Tier",
    "x_AgentType",
    "x_GpuModel",
    "x_ActivityMeasured",
    sum("ConsumedQuantity") as "ConsumedQuantity",
    sum("ListCost") as "ListCost",
    sum("EffectiveCost") as "EffectiveCost",
    sum("x_CapacityGpuHours") as "x_CapacityGpuHours",
    count(*) as lines
from {{ ref('gpu_cost_hourly') }}
{%- if is_incremental() %}
where "ChargePeriodStart" >= {{ finops_window_start('max("ChargePeriodStart") - ' ~ lookback) }}
  {%- if restate_from is not none %}
   or ("ChargePeriodStart" >= '{{ restate_from }}'::timestamptz and "ChargePeriodStart" < '{{ restate_to }}'::timestamptz)
  {%- endif %}
{%- endif %}
group by 1, 2, 3, 4, 5, 6, 7, 8
