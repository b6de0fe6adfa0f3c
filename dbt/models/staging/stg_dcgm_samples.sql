-- Every DCGM sample with its series' labels: the one place the two telemetry tables are joined.
select
    s.series_id,
    s.ts,
    s.value,
    r.metric,
    r.hostname,
    r.gpu_uuid,
    r.gpu as gpu_index,
    r.gpu_instance_id,
    r.gpu_instance_profile,
    r.model_name,
    r.namespace,
    r.pod,
    r.container,
    r.job
from {{ source('telemetry', 'dcgm_samples') }} as s
join {{ source('telemetry', 'dcgm_series') }} as r on r.series_id = s.series_id
