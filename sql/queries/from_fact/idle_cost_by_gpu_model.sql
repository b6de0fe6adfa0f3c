-- Idle GPU capacity by GPU model this month (UTC), allocation basis: GPU-hours nobody requested,
-- priced at list, and the idle share of capacity.
with params as (
    select date_trunc(
        'month', coalesce(nullif(current_setting('gpufabric.as_of', true), '')::timestamptz, now()), 'UTC'
    ) as month_start
)
select
    f."x_GpuModel" as gpu_model,
    sum(f."ConsumedQuantity") as idle_gpu_hours,
    sum(f."x_CapacityGpuHours") as capacity_gpu_hours,
    round(sum(f."ConsumedQuantity") / nullif(sum(f."x_CapacityGpuHours"), 0), 4) as idle_share,
    sum(f."ListCost") as idle_cost_usd
from finops.gpu_cost_hourly as f
cross join params as p
where f."x_CostBasis" = 'allocation'
  and f."x_LineType" = 'idle'
  and f."ChargePeriodStart" >= p.month_start
  and f."ChargePeriodStart" < p.month_start + interval '1 month'
group by 1
order by idle_cost_usd desc nulls last, gpu_model
