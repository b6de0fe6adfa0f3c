-- Per UTC month, agent tree (x_RootId) and pod (ResourceId): the pod's allocation-basis workload
-- lines of that month summed. One row per pod and month, so the pods of a tree in a month are a
-- count of rows: "top agent trees this month" (sql/queries/top_agent_trees_by_cost.sql) reads about
-- 300,000 narrow rows a month instead of counting distinct pods over 600,000 wide lines. A pod
-- whose root label changed keeps one row per root it was priced under, as the fact's lines do.
-- Unattributed pods are kept (the query leaves them out) so a pod is never missing from a batch.
--
-- Incremental per (month, pod): a build finds the pods with lines from finops_lookback_hours before
-- its own newest hour on (and, on a restatement, in the restated hours), through the fact's unique
-- index, and re-sums each such pod over its whole month through the fact's (ResourceId,
-- ChargePeriodStart) index; rows are replaced per (month, pod) (delete+insert).
{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key=['month', 'resource_id'],
    on_schema_change='fail',
    indexes=[
      {'columns': ['month', 'resource_id', 'root_id'], 'unique': True},
      {'columns': ['month', 'root_id']},
      {'columns': ['last_hour']},
    ],
) }}

{%- set lookback = "interval '" ~ (var('finops_lookback_hours', 3) | int) ~ " hours'" -%}
{%- do finops_check_restate() -%}
{%- set restate_from = var('restate_from', none) -%}
{%- set restate_to = var('restate_to', none) %}

{%- set columns = '"ChargePeriodStart", "x_RootId", "ResourceId", "SubAccountId", "x_Depth", "ConsumedQuantity", "EffectiveCost"' %}

with
{% if is_incremental() %}
-- The pods with lines in the lookback (or the restated hours): the fact's unique index on
-- (x_CostBasis, ChargePeriodStart, ...) finds them.
touched as (
    select distinct "ResourceId" as resource_id, date_trunc('month', "ChargePeriodStart", 'UTC') as month
    from {{ ref('gpu_cost_hourly') }}
    where "x_CostBasis" = 'allocation'
      and "x_LineType" = 'workload'
      and ("ChargePeriodStart" >= {{ finops_window_start('max(last_hour) - ' ~ lookback) }}
      {%- if restate_from is not none %}
           or ("ChargePeriodStart" >= '{{ restate_from }}'::timestamptz
               and "ChargePeriodStart" < '{{ restate_to }}'::timestamptz)
      {%- endif %})
),

-- Each touched pod's lines of that month: one probe of the fact's (ResourceId, ChargePeriodStart)
-- index per pod (a lateral, so the planner cannot turn it into a scan of the whole fact).
lines as (
    select f.*
    from touched as t
    cross join lateral (
        select {{ columns }}
        from {{ ref('gpu_cost_hourly') }}
        where "ResourceId" = t.resource_id
          and "ChargePeriodStart" >= t.month
          and "ChargePeriodStart" < ((t.month at time zone 'UTC') + interval '1 month') at time zone 'UTC'
          and "x_CostBasis" = 'allocation'
          and "x_LineType" = 'workload'
    ) as f
)
{% else %}
lines as (
    select {{ columns }}
    from {{ ref('gpu_cost_hourly') }}
    where "x_CostBasis" = 'allocation' and "x_LineType" = 'workload'
)
{% endif %}

select
    date_trunc('month', "ChargePeriodStart", 'UTC') as month,
    "x_RootId" as root_id,
    "ResourceId" as resource_id,
    min("SubAccountId") as client,
    max("x_Depth") as max_depth,
    sum("ConsumedQuantity") as gpu_hours,
    sum("EffectiveCost") as effective_cost_usd,
    min("ChargePeriodStart") as first_hour,
    max("ChargePeriodStart") as last_hour
from lines
group by 1, 2, 3
