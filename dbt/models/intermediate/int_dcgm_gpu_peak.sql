-- The BF16 dense peak and reference clock of each GPU model seen in telemetry, matched on
-- dcgm-exporter's modelName (regex from the seed, lowest priority wins), and the compute share of
-- each MIG profile (3g.40gb on a 7-slice GPU = 3/7).
with models as (
    select distinct model_name, gpu_instance_profile
    from {{ ref('int_dcgm_gpu_samples') }}
)

select
    m.model_name,
    m.gpu_instance_profile,
    p.gpu_model,
    p.dense_tflops,
    p.ref_sm_clock_mhz,
    p.mig_slices,
    case
        when m.gpu_instance_profile is null then 1.0
        when coalesce(p.mig_slices, 0) > 0
            then (substring(m.gpu_instance_profile from '(\d+)g\.'))::double precision / p.mig_slices
    end as sm_share
from models as m
left join lateral (
    select *
    from {{ ref('gpu_peak_flops') }} as f
    where f.precision = 'bf16' and m.model_name ~* f.model_name_regex
    order by f.priority, f.gpu_model
    limit 1
) as p on true
