-- Per GPU (or MIG instance) and hour. A window with fewer than two samples of the tensor pipe is
-- shorter than two scrape intervals: it is marked measured = false and its ratios are NULL (not
-- guessed). An idle GPU that reported zeros is measured and shows 0.
with per_gpu as (
    select
        hour,
        gpu_uuid,
        gpu_instance_key,
        max(hostname) as hostname,
        max(model_name) as model_name,
        max(gpu_model) as gpu_model,
        max(gpu_instance_profile) as gpu_instance_profile,
        max(peak_tflops) as peak_tflops,
        count(*) as samples,
        count(tensor_active) as tensor_samples,
        min(ts) as first_sample,
        max(ts) as last_sample,
        avg(sm_active) as sm_active,
        avg(sm_occupancy) as sm_occupancy,
        avg(tensor_active) as tensor_active,
        avg(dram_active) as dram_active,
        avg(sm_clock_mhz) as sm_clock_mhz,
        avg(hw_flop_util) as hw_flop_util
    from {{ ref('int_dcgm_gpu_flops') }}
    group by 1, 2, 3
),

judged as (
    select
        *,
        tensor_samples >= 2 as measured,
        case when samples > 1
            then extract(epoch from last_sample - first_sample) / (samples - 1)
        end as scrape_interval_s
    from per_gpu
)

select
    hour,
    gpu_uuid,
    gpu_instance_key,
    hostname,
    model_name,
    gpu_model,
    gpu_instance_profile,
    samples,
    scrape_interval_s,
    measured,
    case when measured then sm_active end as sm_active,
    case when measured then sm_occupancy end as sm_occupancy,
    case when measured then tensor_active end as tensor_active,
    case when measured then dram_active end as dram_active,
    case when measured then sm_clock_mhz end as sm_clock_mhz,
    case when measured then hw_flop_util end as hw_flop_util,
    peak_tflops,
    case when measured then hw_flop_util * peak_tflops end as achieved_tflops,
    coalesce(
        (case when measured then
            coalesce(sm_active between 0 and 1, true)
            and coalesce(sm_occupancy between 0 and 1, true)
            and coalesce(tensor_active between 0 and 1, true)
            and coalesce(dram_active between 0 and 1, true)
            and coalesce(hw_flop_util between 0 and 1.25, true)
        end),
        true
    ) as values_in_range
from judged
