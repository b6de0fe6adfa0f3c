-- What training jobs report about themselves (tokens/s and parameter count), per job and scrape.
-- Metric names are vars so a site can point them at its framework's own gauges.
select
    namespace,
    job,
    ts,
    max(value) filter (where metric = '{{ var("tokens_per_second_metric", "gpufabric_workload_tokens_per_second") }}')
        as tokens_per_s,
    max(value) filter (where metric = '{{ var("model_parameters_metric", "gpufabric_workload_model_parameters") }}')
        as parameters
from {{ ref('stg_dcgm_samples') }}
where job is not null
  and metric in (
      '{{ var("tokens_per_second_metric", "gpufabric_workload_tokens_per_second") }}',
      '{{ var("model_parameters_metric", "gpufabric_workload_model_parameters") }}'
  )
group by 1, 2, 3
