-- Efficiency against cost per agent type this month (UTC): what was allocated, what was used
-- (allocation x measured SM activity), the share of GPU-hours actually measured, and the price of
-- a used GPU-hour. Unmeasured hours count as fully used (the usage basis' fallback).
-- Reads finops.cost_summary_hourly (the cost fact summed per hour); the same question straight
-- off finops.gpu_cost_hourly is from_fact/efficiency_vs_cost_by_agent_type.sql, same answer.
with params as (
    select date_trunc(
        'month', coalesce(nullif(current_setting('gpufabric.as_of', true), '')::timestamptz, now()), 'UTC'
    ) as month_start
)
select
    f."x_AgentType" as agent_type,
    sum(f."ConsumedQuantity") filter (where f."x_CostBasis" = 'allocation') as allocated_gpu_hours,
    sum(f."ConsumedQuantity") filter (where f."x_CostBasis" = 'usage') as used_gpu_hours,
    round(
        sum(f."ConsumedQuantity") filter (where f."x_CostBasis" = 'usage')
        / nullif(sum(f."ConsumedQuantity") filter (where f."x_CostBasis" = 'allocation'), 0), 4
    ) as efficiency,
    round(
        coalesce(sum(f."ConsumedQuantity") filter (where f."x_CostBasis" = 'allocation' and f."x_ActivityMeasured"), 0)
        / nullif(sum(f."ConsumedQuantity") filter (where f."x_CostBasis" = 'allocation'), 0), 4
    ) as measured_share,
    sum(f."EffectiveCost") filter (where f."x_CostBasis" = 'allocation') as allocated_cost_usd,
    round(
        sum(f."EffectiveCost") filter (where f."x_CostBasis" = 'allocation')
        / nullif(sum(f."ConsumedQuantity") filter (where f."x_CostBasis" = 'usage'), 0), 4
    ) as usd_per_used_gpu_hour
from finops.cost_summary_hourly as f
cross join params as p
where f."x_LineType" = 'workload'
  and f."ChargePeriodStart" >= p.month_start
  and f."ChargePeriodStart" < p.month_start + interval '1 month'
group by 1
order by allocated_cost_usd desc nulls last, agent_type
