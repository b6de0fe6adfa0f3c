-- Cost by client and tier, this month (UTC), allocation basis. Idle capacity is its own line.
-- "This month" is the month of now(), or of the session setting gpufabric.as_of when set:
--   SET gpufabric.as_of = '2026-11-08T23:00Z';
-- Reads finops.cost_summary_hourly (the cost fact summed per hour); the same question straight
-- off finops.gpu_cost_hourly is from_fact/cost_by_client_tier_this_month.sql, same answer.
with params as (
    select date_trunc(
        'month', coalesce(nullif(current_setting('gpufabric.as_of', true), '')::timestamptz, now()), 'UTC'
    ) as month_start
)
select
    coalesce(f."SubAccountId", '(idle capacity)') as client,
    coalesce(f."x_Tier", '-') as tier,
    sum(f."ConsumedQuantity") as gpu_hours,
    sum(f."ListCost") as list_cost_usd,
    sum(f."EffectiveCost") as effective_cost_usd
from finops.cost_summary_hourly as f
cross join params as p
where f."x_CostBasis" = 'allocation'
  and f."ChargePeriodStart" >= p.month_start
  and f."ChargePeriodStart" < p.month_start + interval '1 month'
group by 1, 2
order by effective_cost_usd desc nulls last, client, tier
