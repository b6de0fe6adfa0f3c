-- Node observations: the GPU model and GPU count that make up capacity, the node's owner, and the
-- MIG layout the device plugin advertises.
--
-- MIG layout (issue 21, part 5; docs/mig.md "Cost"): under the device plugin's *mixed* strategy
-- every MIG profile on the node is an allocatable `nvidia.com/mig-<profile>` count and
-- `nvidia.com/gpu` counts the GPUs left without MIG (absent: none), while GPU Feature Discovery's
-- `nvidia.com/gpu.count` keeps the physical GPUs (NVIDIA/k8s-device-plugin,
-- docs/gpu-feature-discovery/README.md, "MIG 'mixed' strategy"). mig_instances holds the counts
-- (profile -> count) only when every `nvidia.com/mig-*` entry is a known profile shape with a
-- plain count and the whole-GPU count is one too; otherwise it is NULL and mig_layout_issue says
-- why, so the layout is never half-read (capacity is then costed as unallocated, never guessed).
-- A node advertising no MIG resource has mig_instances NULL and no issue. The *single* strategy
-- overloads `nvidia.com/gpu` with instances and is not read as a layout here.
--
-- owner: the tenant the node belongs to, from the node label named by var finops_owner_label
-- (default gpufabric.io/owner) when it is a valid label value; idle lines of the node go to it.
select
    n.source as cluster,
    n.run_id,
    n.collected_at,
    n.node,
    n.gpu_model,
    n.gpu_count,
    n.mig_capable,
    case
        when jsonb_typeof(n.labels) = 'object'
            and n.labels ->> '{{ var("finops_owner_label", "gpufabric.io/owner") }}'
                ~ '^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'
        then n.labels ->> '{{ var("finops_owner_label", "gpufabric.io/owner") }}'
    end as owner,
    case when m.entries > 0 and m.bad_entries is null and whole.ok then m.instances end as mig_instances,
    case when m.entries > 0 and m.bad_entries is null and whole.ok then whole.gpus end as mig_whole_gpus,
    case
        when m.entries = 0 then null
        when m.bad_entries is not null then 'unreadable MIG resources: ' || m.bad_entries
        when not whole.ok then 'unreadable nvidia.com/gpu: ' || left(n.allocatable ->> 'nvidia.com/gpu', 40)
    end as mig_layout_issue
from {{ source('k8s', 'k8s_node_snapshots') }} as n
-- per row, not grouped over the table: the cost fact looks up one snapshot per node-hour by index
cross join lateral (
    select
        count(*) as entries,
        jsonb_object_agg(substring(a.key from 16), a.value::integer) filter (
            where a.key ~ '^nvidia\.com/mig-[1-7]g\.[0-9]+gb(\+me)?$' and a.value ~ '^[0-9]{1,6}$'
        ) as instances,
        string_agg(left(a.key, 80) || '=' || left(a.value, 40), ', ' order by a.key) filter (
            where not (a.key ~ '^nvidia\.com/mig-[1-7]g\.[0-9]+gb(\+me)?$' and a.value ~ '^[0-9]{1,6}$')
        ) as bad_entries
    from jsonb_each_text(
        case when jsonb_typeof(n.allocatable) = 'object' then n.allocatable else '{}'::jsonb end
    ) as a(key, value)
    where a.key like 'nvidia.com/mig-%'
) as m
cross join lateral (
    select
        coalesce(n.allocatable ->> 'nvidia.com/gpu', '0') ~ '^[0-9]{1,6}$' as ok,
        case when coalesce(n.allocatable ->> 'nvidia.com/gpu', '0') ~ '^[0-9]{1,6}$'
            then coalesce(n.allocatable ->> 'nvidia.com/gpu', '0')::integer end as gpus
) as whole
