-- One row per GPU (or MIG instance) per scrape: the profiling ratios of that GPU/instance beside
-- the SM clock of its physical GPU. Device-level fields (the clock) are stored once per GPU even
-- under MIG (core/telemetry.py collapses dcgm-exporter's per-instance repeats), so they join back
-- on (gpu_uuid, ts). gpu_instance_key is -1 for a whole GPU so keys never hold NULL.
with prof as (
    select
        gpu_uuid,
        coalesce(gpu_instance_id, -1) as gpu_instance_key,
        ts,
        max(hostname) as hostname,
        max(model_name) as model_name,
        max(gpu_instance_profile) as gpu_instance_profile,
        max(namespace) as namespace,
        max(pod) as pod,
        max(job) as job,
        max(value) filter (where metric = 'DCGM_FI_PROF_SM_ACTIVE') as sm_active,
        max(value) filter (where metric = 'DCGM_FI_PROF_SM_OCCUPANCY') as sm_occupancy,
        max(value) filter (where metric = 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE') as tensor_active,
        max(value) filter (where metric = 'DCGM_FI_PROF_DRAM_ACTIVE') as dram_active
    from {{ ref('stg_dcgm_samples') }}
    where gpu_uuid is not null
      and metric in (
          'DCGM_FI_PROF_SM_ACTIVE', 'DCGM_FI_PROF_SM_OCCUPANCY',
          'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE', 'DCGM_FI_PROF_DRAM_ACTIVE'
      )
    group by 1, 2, 3
),

clock as (
    select gpu_uuid, ts, max(value) as sm_clock_mhz
    from {{ ref('stg_dcgm_samples') }}
    where metric = 'DCGM_FI_DEV_SM_CLOCK' and gpu_uuid is not null
    group by 1, 2
)

select prof.*, clock.sm_clock_mhz
from prof
left join clock on clock.gpu_uuid = prof.gpu_uuid and clock.ts = prof.ts
