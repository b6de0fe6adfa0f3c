-- The usage basis' interface to telemetry: measured GPU activity per pod and UTC hour from the
-- efficiency marts (SM active, 0-1, sample-weighted over the pod's GPUs or MIG instances),
-- rounded to 4 decimals so usage costs stay exact decimals. measured = false means fewer than
-- two samples on some GPU of the pod in that hour: the usage basis then falls back to the
-- allocation (never a guessed activity).
select
    hour,
    namespace,
    pod,
    measured,
    case when measured then least(greatest(round(sm_active::numeric, 4), 0), 1) end as activity
from {{ ref('pod_efficiency_hourly') }}
where namespace is not null and pod is not null
