-- Per pod and hour, over the GPUs (or MIG instances) the pod held. Ratios are sample-weighted
-- means; hardware FLOP utilisation is achieved over peak FLOP/s summed across its GPUs, so a pod
-- on a 3g MIG slice is judged against 3/7 of a GPU. Measured only when every GPU of the pod has
-- at least two samples in the hour.
with per_gpu as (
    select
        hour,
        namespace,
        pod,
        gpu_uuid,
        gpu_instance_key,
        max(peak_tflops) as peak_tflops,
        count(*) as samples,
        count(tensor_active) as tensor_samples,
        sum(sm_active) as sm_active_sum,
        count(sm_active) as sm_active_n,
        sum(sm_occupancy) as sm_occupancy_sum,
        count(sm_occupancy) as sm_occupancy_n,
        sum(tensor_active) as tensor_sum,
        sum(dram_active) as dram_sum,
        count(dram_active) as dram_n,
        avg(hw_flop_util) as hw_flop_util
    from {{ ref('int_dcgm_gpu_flops') }}
    where pod is not null
    group by 1, 2, 3, 4, 5
),

per_pod as (
    select
        hour,
        namespace,
        pod,
        count(*) as gpus,
        sum(samples) as samples,
        min(tensor_samples) >= 2 as measured,
        sum(sm_active_sum) / nullif(sum(sm_active_n), 0) as sm_active,
        sum(sm_occupancy_sum) / nullif(sum(sm_occupancy_n), 0) as sm_occupancy,
        sum(tensor_sum) / nullif(sum(tensor_samples), 0) as tensor_active,
        sum(dram_sum) / nullif(sum(dram_n), 0) as dram_active,
        sum(peak_tflops) as peak_tflops,
        sum(hw_flop_util * peak_tflops) as achieved_tflops
    from per_gpu
    group by 1, 2, 3
)

select
    hour,
    namespace,
    pod,
    gpus,
    samples,
    measured,
    case when measured then sm_active end as sm_active,
    case when measured then sm_occupancy end as sm_occupancy,
    case when measured then tensor_active end as tensor_active,
    case when measured then dram_active end as dram_active,
    peak_tflops,
    case when measured then achieved_tflops end as achieved_tflops,
    case when measured then achieved_tflops / nullif(peak_tflops, 0) end as hw_flop_util,
    coalesce(
        (case when measured then
            coalesce(sm_active between 0 and 1, true)
            and coalesce(tensor_active between 0 and 1, true)
            and coalesce(achieved_tflops / nullif(peak_tflops, 0) between 0 and 1.25, true)
        end),
        true
    ) as values_in_range
from per_pod
