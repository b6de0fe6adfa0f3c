-- The agent trees (root id) that cost the most this month (UTC), allocation basis.
-- Live per-tree state (live pods, burn rate) is in agents.tree_usage, for the budget controller.
with params as (
    select date_trunc(
        'month', coalesce(nullif(current_setting('gpufabric.as_of', true), '')::timestamptz, now()), 'UTC'
    ) as month_start
)
select
    f."x_RootId" as root_id,
    min(f."SubAccountId") as client,
    count(distinct f."ResourceId") as pods,
    max(f."x_Depth") as max_depth,
    sum(f."ConsumedQuantity") as gpu_hours,
    sum(f."EffectiveCost") as effective_cost_usd,
    min(f."ChargePeriodStart") as first_hour,
    max(f."ChargePeriodStart") as last_hour
from finops.gpu_cost_hourly as f
cross join params as p
where f."x_CostBasis" = 'allocation'
  and f."x_LineType" = 'workload'
  and f."x_RootId" <> 'unattributed'
  and f."ChargePeriodStart" >= p.month_start
  and f."ChargePeriodStart" < p.month_start + interval '1 month'
group by 1
order by effective_cost_usd desc nulls last, root_id
limit 20
