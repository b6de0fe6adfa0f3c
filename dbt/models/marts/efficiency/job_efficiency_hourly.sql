-- Per job and hour: the hardware estimate over the job's GPUs and, where the job reports its
-- throughput and model size, model MFU = 6 * N * tokens/s / peak FLOP/s of its GPUs
-- (core/mfu.py: model_mfu). Throughput with fewer than two samples in the hour is unmeasured.
with per_gpu as (
    select
        hour,
        namespace,
        job,
        gpu_uuid,
        gpu_instance_key,
        max(peak_tflops) as peak_tflops,
        count(*) as samples,
        count(tensor_active) as tensor_samples,
        sum(sm_active) as sm_active_sum,
        count(sm_active) as sm_active_n,
        sum(tensor_active) as tensor_sum,
        avg(hw_flop_util) as hw_flop_util
    from {{ ref('int_dcgm_gpu_flops') }}
    where job is not null
    group by 1, 2, 3, 4, 5
),

per_job as (
    select
        hour,
        namespace,
        job,
        count(*) as gpus,
        count(distinct gpu_uuid) as physical_gpus,
        sum(samples) as samples,
        min(tensor_samples) >= 2 as measured,
        sum(sm_active_sum) / nullif(sum(sm_active_n), 0) as sm_active,
        sum(tensor_sum) / nullif(sum(tensor_samples), 0) as tensor_active,
        sum(peak_tflops) as peak_tflops,
        sum(hw_flop_util * peak_tflops) as achieved_tflops
    from per_gpu
    group by 1, 2, 3
),

throughput as (
    select
        date_trunc('hour', ts) as hour,
        namespace,
        job,
        avg(tokens_per_s) as tokens_per_s,
        count(tokens_per_s) as tokens_samples,
        max(parameters) as parameters
    from {{ ref('int_dcgm_workload_throughput') }}
    group by 1, 2, 3
)

select
    j.hour,
    j.namespace,
    j.job,
    j.gpus,
    j.physical_gpus,
    j.samples,
    j.measured,
    case when j.measured then j.sm_active end as sm_active,
    case when j.measured then j.tensor_active end as tensor_active,
    j.peak_tflops,
    case when j.measured then j.achieved_tflops end as achieved_tflops,
    case when j.measured then j.achieved_tflops / nullif(j.peak_tflops, 0) end as hw_flop_util,
    case when t.tokens_samples >= 2 then t.tokens_per_s end as tokens_per_s,
    t.parameters,
    case when t.tokens_samples >= 2 and t.parameters is not null
        then 6 * t.parameters * t.tokens_per_s / nullif(j.peak_tflops * 1e12, 0)
    end as model_mfu,
    coalesce(
        (case when j.measured then
            coalesce(j.sm_active between 0 and 1, true)
            and coalesce(j.achieved_tflops / nullif(j.peak_tflops, 0) between 0 and 1.25, true)
        end),
        true
    ) and coalesce(
        (case when t.tokens_samples >= 2 and t.parameters is not null
            then 6 * t.parameters * t.tokens_per_s / nullif(j.peak_tflops * 1e12, 0) between 0 and 1 end),
        true
    ) as values_in_range
from per_job as j
left join throughput as t
    on t.hour = j.hour and t.namespace = j.namespace and t.job = j.job
