-- Cost anomalies this week (ISO week, Monday 00:00 UTC), largest impact first, with alert status.
with params as (
    select date_trunc(
        'week', coalesce(nullif(current_setting('gpufabric.as_of', true), '')::timestamptz, now()), 'UTC'
    ) as week_start
)
select
    a.hour,
    a.client,
    a.agent_type,
    a.tier,
    a.method,
    a.expected_usd,
    a.actual_usd,
    a.impact_usd,
    round(a.score::numeric, 2) as score,
    a.alert_status
from finops.cost_anomalies as a
cross join params as p
where a.hour >= p.week_start and a.hour < p.week_start + interval '7 days'
order by a.impact_usd desc, a.hour, a.client
