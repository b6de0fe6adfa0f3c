-- Scheduling lag where users feel it: per lag-watch run, cluster, 5-minute bucket of creation,
-- tenant (client), tier and agent type, the p50/p95/p99/max of creation -> PodScheduled,
-- creation -> Running and creation -> Kueue admission. Percentiles are percentile_cont (linear
-- interpolation between the two nearest ranks) over the pods that reached the event; pods that
-- had not by the end of the window are counted in pods_not_running with the longest wait so far
-- (max_waiting_s), so a stuck burst shows up instead of vanishing from the percentiles.
select
    run_id,
    cluster,
    bucket,
    client,
    tier,
    agent_type,
    max(window_end) as window_end,
    count(*) as pods,
    count(scheduled_at) as pods_scheduled,
    count(running_at) as pods_running,
    count(*) - count(running_at) as pods_not_running,
    count(admitted_at) as pods_admitted,
    percentile_cont(0.50) within group (order by scheduled_lag_s) as scheduled_lag_p50_s,
    percentile_cont(0.95) within group (order by scheduled_lag_s) as scheduled_lag_p95_s,
    percentile_cont(0.99) within group (order by scheduled_lag_s) as scheduled_lag_p99_s,
    max(scheduled_lag_s) as scheduled_lag_max_s,
    percentile_cont(0.50) within group (order by running_lag_s) as running_lag_p50_s,
    percentile_cont(0.95) within group (order by running_lag_s) as running_lag_p95_s,
    percentile_cont(0.99) within group (order by running_lag_s) as running_lag_p99_s,
    max(running_lag_s) as running_lag_max_s,
    percentile_cont(0.50) within group (order by admitted_lag_s) as admitted_lag_p50_s,
    percentile_cont(0.99) within group (order by admitted_lag_s) as admitted_lag_p99_s,
    max(admitted_lag_s) as admitted_lag_max_s,
    max(waiting_s) as max_waiting_s,
    -- schema test: every percentile ladder is ordered (p50 <= p95 <= p99 <= max) where defined
    coalesce(
        percentile_cont(0.50) within group (order by running_lag_s)
        <= percentile_cont(0.95) within group (order by running_lag_s)
        and percentile_cont(0.95) within group (order by running_lag_s)
        <= percentile_cont(0.99) within group (order by running_lag_s)
        and percentile_cont(0.99) within group (order by running_lag_s) <= max(running_lag_s),
        true
    )
    and coalesce(
        percentile_cont(0.50) within group (order by scheduled_lag_s)
        <= percentile_cont(0.95) within group (order by scheduled_lag_s)
        and percentile_cont(0.95) within group (order by scheduled_lag_s)
        <= percentile_cont(0.99) within group (order by scheduled_lag_s)
        and percentile_cont(0.99) within group (order by scheduled_lag_s) <= max(scheduled_lag_s),
        true
    ) as percentiles_ordered
from {{ ref('stg_k8s_pod_lag') }}
group by run_id, cluster, bucket, client, tier, agent_type
