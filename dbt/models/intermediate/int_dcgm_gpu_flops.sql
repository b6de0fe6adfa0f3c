-- Per GPU/MIG instance and scrape: the hardware-estimated FLOP utilisation of that instant,
--   tensor_active * sm_clock / ref_clock   (core/mfu.py: hw_flop_utilisation)
-- and the instance's peak (the GPU's BF16 dense peak times its MIG compute share), so marts can
-- add achieved and peak FLOP/s across GPUs of a pod or job.
select
    s.*,
    date_trunc('hour', s.ts) as hour,
    p.gpu_model,
    p.ref_sm_clock_mhz,
    p.dense_tflops * p.sm_share as peak_tflops,
    s.tensor_active * s.sm_clock_mhz / p.ref_sm_clock_mhz as hw_flop_util
from {{ ref('int_dcgm_gpu_samples') }} as s
left join {{ ref('int_dcgm_gpu_peak') }} as p
    on p.model_name is not distinct from s.model_name
   and p.gpu_instance_profile is not distinct from s.gpu_instance_profile
