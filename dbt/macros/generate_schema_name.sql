{#- Use the custom schema as-is (staging, finops, efficiency), not dbt's default
    "<target schema>_<custom>": analysts and the finops_reader grants name these schemas. -#}
{% macro generate_schema_name(custom_schema_name, node) -%}
    {{ custom_schema_name | trim if custom_schema_name is not none else target.schema }}
{%- endmacro %}
