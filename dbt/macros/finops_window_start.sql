{#- The start of an incremental FinOps model's window: `expression` (an aggregate over the
    model's own table giving a timestamptz, NULL when it is empty) read when the model runs and
    written into its SQL as a literal. Postgres estimates a literal from the column's statistics,
    so the window's few rows are probed through an index; a subquery in its place is estimated at
    a third of the table, and the window is then scanned as if it were (a seq scan of every
    snapshot or cost line on each hourly build). Whole seconds are enough: the windows start on
    the hour. `where` narrows the rows the aggregate reads, so an index can answer it (the cost
    fact's max("ChargePeriodStart") over one basis is a backward probe of its unique index; over
    every row it is a scan of the whole year). -#}
{% macro finops_window_start(expression, where=none) -%}
  {%- if execute -%}
    {%- set epoch = run_query("select extract(epoch from " ~ expression ~ ")::bigint from " ~ this
        ~ (" where " ~ where if where is not none else "")).columns[0].values()[0] -%}
    {%- if epoch is not none -%}to_timestamp({{ epoch }}){%- else -%}'-infinity'::timestamptz{%- endif -%}
  {%- else -%}'-infinity'::timestamptz{%- endif -%}
{%- endmacro %}

{#- A restatement's range comes as two vars (`gpufabric finops restate` sets both); one without
    the other is a mistake, refused here rather than compiled into a comparison with 'None'. -#}
{% macro finops_check_restate() -%}
  {%- set lo = var('restate_from', none) -%}
  {%- set hi = var('restate_to', none) -%}
  {%- if (lo is none) != (hi is none) -%}
    {{ exceptions.raise_compiler_error("restate_from and restate_to go together, got restate_from="
        ~ lo ~ " and restate_to=" ~ hi) }}
  {%- endif -%}
{%- endmacro %}
