-- Agent pods with their lags in seconds, one row per pod per lag-watch run. Times are the API
-- server's own (whole seconds). A lag is NULL while its event has not happened by window_end;
-- waiting_s is how long such a pod had waited by then (a lower bound on its lag, never dropped).
select
    run_id,
    source as cluster,
    window_start,
    window_end,
    uid,
    namespace,
    name as pod,
    client,
    tier,
    agent_type,
    root_id,
    created_at,
    scheduled_at,
    running_at,
    admitted_at,
    extract(epoch from scheduled_at - created_at)::double precision as scheduled_lag_s,
    extract(epoch from running_at - created_at)::double precision as running_lag_s,
    extract(epoch from admitted_at - created_at)::double precision as admitted_lag_s,
    case when running_at is null
        then greatest(extract(epoch from window_end - created_at), 0)::double precision
    end as waiting_s,
    -- the 5-minute bucket of the pod's creation: lag is charged to when the demand arrived
    date_bin(interval '5 minutes', created_at, timestamptz '2000-01-01 00:00:00+00') as bucket
from {{ source('k8s_lag', 'k8s_pod_lag') }}
