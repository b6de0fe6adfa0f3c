-- The FinOps cost fact: one line per pod, node and UTC hour, per cost basis, plus one idle line
-- per node and hour per basis. Shaped after FOCUS 1.x (column names as the spec spells them;
-- our own columns start with x_). Two bases side by side (x_CostBasis):
--   allocation  requested GPUs x time (what OpenCost does)
--   usage       allocation x measured activity (SM active) from the efficiency marts; a pod-hour
--               without a measurement falls back to its allocation (x_ActivityMeasured = false)
-- Idle capacity is its own line (x_LineType = 'idle', SubAccountId NULL), never spread onto
-- tenants, so for every node, hour and basis: sum(ConsumedQuantity) = node GPUs x 1 h.
--
-- Exactness: each line is rounded once, half away from zero to 9 decimals, from an exact
-- numerator/denominator with integer div() (core/finops/money.py round_line is the same rule);
-- idle = capacity - the rounded tenant lines, so the identity above holds exactly.
--
-- FOCUS conformance (docs/focus.md): PricingQuantity carries 18 decimals, not 9, because FOCUS
-- requires ListUnitPrice x PricingQuantity = ListCost (and ContractedUnitPrice x PricingQuantity =
-- ContractedCost); with both sides rounded to 9 decimals the product misses the once-rounded cost
-- by up to (1 + price) x 0.5e-9, over the 1e-9 the Foundation's validator allows. ConsumedQuantity
-- and the money stay as they were. ContractedUnitPrice is the tier's rate (idle: list).
--
-- Incremental (issue 25). Prices come from the price book (source finops.price_book, loaded from
-- the site file). A build recomputes only the hours from finops_lookback_hours (default 3) before
-- the newest line on: the open hour and late snapshots, so one new hour does not rebuild the
-- year. A new line is priced by the book in force for its hour; a line already in the table keeps
-- its price even when the lookback recomputes its quantity, so a rate change never rewrites what
-- was priced. `gpufabric finops restate` sets restate_from/restate_to to reprice [from, to) with
-- the current book (audited in ops.finops_restatements); it is also how snapshots that arrive
-- later than the lookback are folded in. --full-refresh reprices everything without an audit row.
{{ config(
    materialized='incremental',
    incremental_strategy='delete+insert',
    unique_key=['"x_CostBasis"', '"ChargePeriodStart"', '"ResourceId"', '"x_Node"'],
    on_schema_change='fail',
    pre_hook="{% if is_incremental() and var('restate_from', none) is not none %}
        delete from {{ this }} where \"ChargePeriodStart\" >= '{{ var('restate_from') }}'::timestamptz
        and \"ChargePeriodStart\" < '{{ var('restate_to') }}'::timestamptz
        {% else %}select 1{% endif %}",
    indexes=[
      {'columns': ['"x_CostBasis"', '"ChargePeriodStart"', '"ResourceId"', '"x_Node"'], 'unique': True},
      {'columns': ['"ResourceId"', '"ChargePeriodStart"']},
      {'columns': ['"SubAccountId"', '"ChargePeriodStart"']},
      {'columns': ['"ChargePeriodStart"'], 'type': 'brin'},
    ],
) }}

{#- The hours this build (re)computes: everything on a first build; a restatement's range;
    else from the lookback before the newest line on. Literal bounds, so the restatement's
    pre-hook and the select agree. -#}
{%- set restate_from = var('restate_from', none) -%}
{%- set restate_to = var('restate_to', none) -%}
{%- if is_incremental() and restate_from is not none -%}
  {%- set window = "hour >= '" ~ restate_from ~ "'::timestamptz and hour < '" ~ restate_to ~ "'::timestamptz" -%}
{%- elif is_incremental() -%}
  {#- Every hour has lines of both bases, so the newest allocation line is the newest line: read
      through the unique index (x_CostBasis leads it), and written in as a literal. -#}
  {%- set lookback = "interval '" ~ (var('finops_lookback_hours', 3) | int) ~ " hours'" -%}
  {%- set window = "hour >= " ~ finops_window_start("max(\"ChargePeriodStart\") - " ~ lookback,
      where="\"x_CostBasis\" = 'allocation'") -%}
{%- else -%}
  {%- set window = "true" -%}
{%- endif %}
{#- A line already priced keeps its price when the lookback recomputes it (its quantity may grow
    with late snapshots); only a restatement reprices. -#}
{%- set keep_prices = is_incremental() and restate_from is none -%}
{%- if keep_prices -%}
  {%- set priced_before = "left join " ~ this ~ " as ex on ex.\"x_CostBasis\" = 'allocation' and ex.\"ListUnitPrice\" is not null and " -%}
{%- else -%}
  {%- set priced_before = "left join (select null::numeric as \"ContractedUnitPrice\", null::numeric as \"ListUnitPrice\", null::text as \"BillingCurrency\", null::timestamptz as \"ChargePeriodStart\", null::text as \"ResourceId\", null::text as \"x_Node\") as ex on false and " -%}
{%- endif %}

{#- Idle capacity belongs to the node's owner (its owner label, stg_k8s_node_snapshots), else to
    the site's idle owner (var finops_idle_owner), else to no one (SubAccountId NULL). -#}
{%- set idle_owner = var('finops_idle_owner', none) -%}
{%- set idle_owner_sql = "null::text" if idle_owner is none else "'" ~ (idle_owner | string | replace("'", "''")) ~ "'::text" %}

with pod_hours as (
    select * from {{ ref('int_finops_pod_hours') }} where {{ window }}
),

node_hours as (
    select * from {{ ref('int_finops_node_hours') }} where {{ window }}
),

book as (
    select * from {{ source('finops', 'price_book') }}
),

activity as (
    select * from {{ ref('int_finops_pod_activity') }}
),

priced as (
    select
        ph.*,
        nh.gpu_model,
        coalesce(ex."ContractedUnitPrice", rc.usd_per_gpu_hour) as usd_per_gpu_hour,
        coalesce(ex."ListUnitPrice", rc.list_usd_per_gpu_hour) as list_usd_per_gpu_hour,
        coalesce(ex."BillingCurrency", rc.currency) as currency,
        coalesce(a.measured, false) as measured,
        a.activity
    from pod_hours as ph
    left join node_hours as nh on nh.cluster = ph.cluster and nh.node = ph.node and nh.hour = ph.hour
    left join lateral (
        select r.unit_price as usd_per_gpu_hour, r.list_unit_price as list_usd_per_gpu_hour, r.currency
        from book as r
        where r.gpu_model = nh.gpu_model
          and r.tier in (ph.tier, '*')
          and r.effective_from <= (ph.hour at time zone 'UTC')::date
          and (r.effective_to is null or (ph.hour at time zone 'UTC')::date < r.effective_to)
        order by (r.tier = ph.tier) desc, r.effective_from desc
        limit 1
    ) as rc on true
    {{ priced_before }} ex."ChargePeriodStart" = ph.hour and ex."ResourceId" = ph.uid::text and ex."x_Node" = ph.node
    left join activity as a on a.namespace = ph.namespace and a.pod = ph.pod and a.hour = ph.hour
),

bases as (
    select p.*, 'allocation' as basis, 1::numeric as factor from priced as p
    union all
    select p.*, 'usage' as basis, case when p.measured then p.activity else 1 end as factor from priced as p
),

exact as (
    select
        b.*,
        b.seconds * b.slice_units * b.factor as q_num,
        b.weight_denominator * 3600::numeric as q_den
    from bases as b
),

workload as (
    select
        e.*,
        div(2 * e.q_num * 1000000000 + e.q_den, 2 * e.q_den) * 0.000000001 as quantity,
        div(2 * e.q_num * 1000000000000000000 + e.q_den, 2 * e.q_den) * 0.000000000000000001 as pricing_quantity,
        div(2 * e.q_num * e.list_usd_per_gpu_hour * 1000000000 + e.q_den, 2 * e.q_den) * 0.000000001 as list_cost,
        div(2 * e.q_num * e.usd_per_gpu_hour * 1000000000 + e.q_den, 2 * e.q_den) * 0.000000001 as effective_cost
    from exact as e
),

bases_list as (
    select 'allocation' as basis
    union all
    select 'usage'
),

idle as (
    select
        nh.cluster,
        nh.node,
        nh.hour,
        nh.gpu_model,
        bl.basis,
        nh.gpu_count::numeric as capacity,
        nh.gpu_count - coalesce(sum(w.quantity), 0) as quantity,
        coalesce(max(nh.owner), {{ idle_owner_sql }}) as owner,
        max(nh.mig_layout) as mig_layout,
        max(nh.mig_layout_issue) as mig_layout_issue,
        max(nh.mig_weight_policy) as mig_weight_policy,
        max(nh.weight_denominator) as weight_denominator,
        max(nh.stranded_slice_units) as stranded_slice_units
    from node_hours as nh
    cross join bases_list as bl
    left join workload as w on w.cluster = nh.cluster and w.node = nh.node and w.hour = nh.hour and w.basis = bl.basis
    where nh.gpu_count > 0
    group by 1, 2, 3, 4, 5, 6
),

{#- Stranded MIG slices (issue 21, part 5; docs/mig.md "Cost"): the compute slices of a node's
    MIG GPUs that no instance covers are a line of their own, at their slice share under the
    weight policy (stranded slices / 7 GPU-hours), rounded once; the rest of the idle capacity
    (free whole GPUs, instances no pod holds) is the 'unallocated' line. The stranded line never
    exceeds the idle capacity (pods seen on a layout that changed within the hour), so the two
    still sum to capacity - workload exactly. -#}
stranded as (
    select
        i.*,
        -- least/greatest skip NULLs: a node without a readable layout must strand nothing
        case when i.stranded_slice_units > 0 then greatest(least(
            div(2 * i.stranded_slice_units * 1000000000 + i.weight_denominator, 2 * i.weight_denominator)
                * 0.000000001,
            i.quantity
        ), 0) else 0 end as stranded_quantity
    from idle as i
),

idle_lines as (
    select
        s.cluster, s.node, s.hour, s.gpu_model, s.basis, s.owner, s.mig_layout, s.mig_layout_issue,
        'unallocated' as reason,
        s.cluster || '/' || s.node as resource_id,
        s.quantity - s.stranded_quantity as quantity,
        s.capacity,
        null::numeric as gpu_units,
        null::text as mig_weight_policy
    from stranded as s
    union all
    select
        s.cluster, s.node, s.hour, s.gpu_model, s.basis, s.owner, s.mig_layout, s.mig_layout_issue,
        'stranded-mig',
        s.cluster || '/' || s.node || '/stranded-mig',
        s.stranded_quantity,
        null::numeric,
        s.stranded_slice_units::numeric / s.weight_denominator,
        s.mig_weight_policy
    from stranded as s
    where s.stranded_slice_units > 0
),

idle_priced as (
    select
        i.*,
        coalesce(ex."ListUnitPrice", rc.list_usd_per_gpu_hour) as list_usd_per_gpu_hour,
        coalesce(ex."BillingCurrency", rc.currency) as currency
    from idle_lines as i
    left join lateral (
        select r.list_unit_price as list_usd_per_gpu_hour, r.currency
        from book as r
        where r.gpu_model = i.gpu_model and r.tier = '*' and r.effective_from <= (i.hour at time zone 'UTC')::date
          and (r.effective_to is null or (i.hour at time zone 'UTC')::date < r.effective_to)
        order by r.effective_from desc
        limit 1
    ) as rc on true
    {{ priced_before }} ex."ChargePeriodStart" = i.hour and ex."ResourceId" = i.resource_id
        and ex."x_Node" = i.node
)

select
    w.hour as "ChargePeriodStart",
    w.hour + interval '1 hour' as "ChargePeriodEnd",
    coalesce(w.currency, (select min(currency) from book), 'USD')::text as "BillingCurrency",
    'Usage'::text as "ChargeCategory",
    ('GPU time of pod ' || w.namespace || '/' || w.pod || ' on ' || w.node)::text as "ChargeDescription",
    'gpufabric'::text as "ProviderName",
    'GPU compute'::text as "ServiceName",
    'Compute'::text as "ServiceCategory",
    w.uid::text as "ResourceId",
    (w.namespace || '/' || w.pod)::text as "ResourceName",
    (case when w.mig_profile is not null then 'Kubernetes Pod (MIG)' else 'Kubernetes Pod (GPU)' end)::text
        as "ResourceType",
    w.quantity::numeric(38, 9) as "ConsumedQuantity",
    'GPU-Hours'::text as "ConsumedUnit",
    w.pricing_quantity::numeric(38, 18) as "PricingQuantity",
    'GPU-Hours'::text as "PricingUnit",
    w.list_usd_per_gpu_hour::numeric(12, 4) as "ListUnitPrice",
    w.usd_per_gpu_hour::numeric(12, 4) as "ContractedUnitPrice",
    w.list_cost::numeric(38, 9) as "ListCost",
    w.effective_cost::numeric(38, 9) as "EffectiveCost",
    w.client::text as "SubAccountId",
    c.display_name::text as "SubAccountName",
    jsonb_build_object(
        'client', w.client, 'task', w.task, 'agent-type', w.agent_type, 'tier', w.tier,
        'root-id', w.root_id, 'parent-id', w.parent_id, 'depth', w.depth,
        'cluster', w.cluster, 'namespace', w.namespace
    ) as "Tags",
    w.basis::text as "x_CostBasis",
    'workload'::text as "x_LineType",
    w.cluster::text as "x_Cluster",
    w.namespace::text as "x_Namespace",
    w.node::text as "x_Node",
    w.gpu_model::text as "x_GpuModel",
    w.task::text as "x_Task",
    w.agent_type::text as "x_AgentType",
    w.tier::text as "x_Tier",
    w.root_id::text as "x_RootId",
    w.parent_id::text as "x_ParentId",
    w.depth::integer as "x_Depth",
    w.mig_profile::text as "x_MigProfile",
    w.mig_weight_policy::text as "x_MigWeightPolicy",
    (w.slice_units::numeric / w.weight_denominator)::numeric(38, 9) as "x_GpuUnits",
    w.seconds::numeric(38, 6) as "x_Seconds",
    w.activity::numeric(6, 4) as "x_Efficiency",
    w.measured::boolean as "x_ActivityMeasured",
    null::numeric(38, 9) as "x_CapacityGpuHours",
    null::text as "x_IdleReason"
from workload as w
left join {{ ref('clients') }} as c on c.client_id = w.client

union all

select
    i.hour,
    i.hour + interval '1 hour',
    coalesce(i.currency, (select min(currency) from book), 'USD'),
    'Usage',
    case i.reason
        when 'stranded-mig' then 'MIG compute slices of ' || i.node || ' no instance covers (' || i.mig_layout || ')'
        else 'Idle GPU capacity of ' || i.node
    end,
    'gpufabric',
    'GPU compute',
    'Compute',
    i.resource_id,
    i.node,
    case i.reason when 'stranded-mig' then 'Stranded MIG slices' else 'Idle GPU capacity' end,
    i.quantity::numeric(38, 9),
    'GPU-Hours',
    i.quantity::numeric(38, 18),
    'GPU-Hours',
    i.list_usd_per_gpu_hour::numeric(12, 4),
    i.list_usd_per_gpu_hour::numeric(12, 4),
    (div(2 * i.quantity * i.list_usd_per_gpu_hour * 1000000000 + 1, 2) * 0.000000001)::numeric(38, 9),
    (div(2 * i.quantity * i.list_usd_per_gpu_hour * 1000000000 + 1, 2) * 0.000000001)::numeric(38, 9),
    i.owner,
    c.display_name,
    jsonb_strip_nulls(jsonb_build_object(
        'cluster', i.cluster, 'node', i.node, 'mig-layout', i.mig_layout, 'mig-layout-issue', i.mig_layout_issue
    )),
    i.basis,
    'idle',
    i.cluster,
    null,
    i.node,
    i.gpu_model,
    null,
    null,
    null,
    null,
    null,
    null,
    null,
    i.mig_weight_policy,
    -- no typmod: the workload branch's numeric(38, 9) and this must union to the contract's plain numeric
    round(i.gpu_units, 9),
    null,
    null,
    null,
    i.capacity::numeric(38, 9),
    i.reason
from idle_priced as i
left join {{ ref('clients') }} as c on c.client_id = i.owner
