"""The DDL model: parse a directory of .sql files once into immutable models (no Dagster, no client)."""
