"""chmv as a Dagster Component: ``dg scaffold defs chmv_assets.component.ChmvComponent <name>`` in a ``dg`` project.

The component is a thin layer over :func:`chmv_assets.orchestration.definitions.build_definitions`: its YAML
fields pick the DDL directory, the ClickHouse engine and a few translator options, and it builds the same
assets, checks, sensors, jobs and resources as the ``workspace.yaml`` code location (``chmv_assets.definitions``).
Customize further in Python the way dagster-dbt does: subclass :class:`ChmvComponent` and override
:meth:`ChmvComponent.get_translator`, or name a :class:`ChmvTranslator` subclass in ``translator_class``.

Example ``defs.yaml``::

    type: chmv_assets.component.ChmvComponent
    attributes:
      ddl_dir: ../../../../ddl                # relative to this file
      dsn: chdb://{{ context.project_root }}/.chmv/chdb
      key_prefix: [clickhouse]
      group_name: warehouse
"""

# No `from __future__ import annotations`: Resolvable derives the YAML schema from the evaluated annotations.
import importlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from dagster import AssetKey, Definitions, EnvVar
from dagster.components import (
    Component,
    ComponentLoadContext,
    ComponentTypeSpec,
    ResolutionContext,
    Resolvable,
    Resolver,
    Scaffolder,
    ScaffoldRequest,
    scaffold_component,
    scaffold_with,
)
from pydantic import BaseModel, Field

from chmv_assets.ddl.loader import LoadedProject, load
from chmv_assets.ddl.models import ObjectRef
from chmv_assets.errors import ChmvError
from chmv_assets.orchestration.definitions import build_definitions, default_clickhouse
from chmv_assets.orchestration.translator import ChmvTranslator
from chmv_assets.settings import redact_dsn
from resources.clickhouse import ClickHouseResource

_CHDB = "chdb://"


def _resolve_ddl_dir(context: ResolutionContext, value: str) -> Path:
    return context.resolve_source_relative_path(context.resolve_value(value, as_type=str))


def _resolve_dsn(context: ResolutionContext, value: str | None) -> str | None:
    dsn = context.resolve_value(value, as_type=str) if value is not None else None
    if dsn and dsn.startswith(_CHDB) and not dsn.removeprefix(_CHDB).startswith("/"):
        return _CHDB + str(context.resolve_source_relative_path(dsn.removeprefix(_CHDB)))
    return dsn


def _resolve_key_prefix(context: ResolutionContext, value: str | list[str] | None) -> list[str]:
    resolved = context.resolve_value(value) if value is not None else []
    return [resolved] if isinstance(resolved, str) else [str(part) for part in resolved]


class ChmvScaffoldParams(BaseModel):
    """Options of ``dg scaffold defs chmv_assets.component.ChmvComponent <name>`` (``--ddl-dir``, ``--dsn``)."""

    ddl_dir: str | None = Field(
        default=None,
        description="The DDL directory, absolute or relative to where dg runs (written relative to defs.yaml). "
        "Default: a new empty ddl/ folder next to defs.yaml.",
    )
    dsn: str | None = Field(
        default=None,
        description="http(s)://host:port or chdb:///path (a relative chdb path is taken from where dg runs). "
        "Default: an embedded engine under <project root>/.chmv/chdb.",
    )


class ChmvComponentScaffolder(Scaffolder[ChmvScaffoldParams]):
    """Writes the ``defs.yaml`` a user edits, with paths rewritten relative to that file."""

    @classmethod
    def get_scaffold_params(cls) -> type[ChmvScaffoldParams]:
        return ChmvScaffoldParams

    def scaffold(self, request: ScaffoldRequest[ChmvScaffoldParams]) -> None:
        params = request.params
        folder = Path(os.path.abspath(request.target_path))
        if params.ddl_dir:
            ddl_dir = _relative_to(params.ddl_dir, folder)
        else:
            (folder / "ddl").mkdir(parents=True, exist_ok=True)
            ddl_dir = "ddl"
        dsn = params.dsn or _CHDB + "{{ context.project_root }}/.chmv/chdb"
        if dsn.startswith(_CHDB):
            dsn = _CHDB + _relative_to(dsn.removeprefix(_CHDB), folder)
        scaffold_component(request, {"ddl_dir": ddl_dir, "dsn": dsn})


def _relative_to(path: str, folder: Path) -> str:
    """A path given relative to where dg runs, made relative to ``folder``; absolute paths and templates stay."""
    if path.startswith(("/", "{")):
        return path
    return os.path.relpath(os.path.abspath(path), folder)  # abspath, not resolve: a symlinked ddl/ stays ddl/


@scaffold_with(ChmvComponentScaffolder)
@dataclass
class ChmvComponent(Component, Resolvable):
    """ClickHouse materialized views from a DDL directory: partitioned rebuilds, checks and sensors.

    One partitioned asset per MV target, rebuilt from the MVs' own SELECT; parity, part-count, drift and
    lint checks on every target; staleness, recovery and drift sensors; the ``chmv_apply`` job (and, with a
    landing zone, the Spark ingestion assets and ``chmv_ingest``): the same definitions as the workspace code
    location. Scaffold it with
    ``dg scaffold defs chmv_assets.component.ChmvComponent <name> --ddl-dir path/to/ddl --dsn <dsn>``;
    deploy the DDL with ``chmv apply --ddl-dir path/to/ddl --dsn <dsn>``.
    """

    ddl_dir: Annotated[
        Path,
        Resolver(
            _resolve_ddl_dir,
            model_field_type=str,
            description="The DDL directory (*.sql and chmv.toml), relative to this defs.yaml or absolute.",
            examples=["ddl", "{{ context.project_root }}/clickhouse/ddl"],
        ),
    ]
    dsn: Annotated[
        str | None,
        Resolver(
            _resolve_dsn,
            model_field_type=str | None,
            description="http(s)://host:port for a server (user from `username`, password from the environment "
            "variable `password_env_var`), or chdb://<path> for the embedded engine (a relative path is taken "
            "from this defs.yaml). Default: $CHMV_CLICKHOUSE_DSN, else the embedded engine under $CHMV_STATE_DIR.",
            examples=["chdb://{{ context.project_root }}/.chmv/chdb", "https://ch.example.com:8443"],
        ),
    ] = None
    username: Annotated[str | None, Resolver.default(description="Server user.")] = None
    password_env_var: Annotated[
        str, Resolver.default(description="Environment variable holding the server password (read at run time).")
    ] = "CLICKHOUSE_PASSWORD"
    default_database: Annotated[
        str | None, Resolver.default(description="Database of unqualified names (overrides chmv.toml).")
    ] = None
    key_prefix: Annotated[
        list[str],
        Resolver(
            _resolve_key_prefix,
            model_field_type=str | list[str] | None,
            description="Prefix of every asset key chmv makes (sources, dictionaries and targets).",
            examples=["clickhouse", ["warehouse", "clickhouse"]],
        ),
    ] = field(default_factory=list)
    group_name: Annotated[
        str | None, Resolver.default(description="One asset group for every chmv asset instead of one per database.")
    ] = None
    translator_class: Annotated[
        str | None,
        Resolver.default(
            description="Import path of a ChmvTranslator subclass to start from (its hooks decide keys, groups, "
            "partitions, descriptions, metadata); key_prefix and group_name still apply on top.",
            examples=["my_project.chmv.MyTranslator"],
        ),
    ] = None

    @classmethod
    def get_spec(cls) -> ComponentTypeSpec:
        return ComponentTypeSpec(
            description="ClickHouse materialized views from a DDL directory: partitioned rebuilds, checks, sensors.",
            tags=["clickhouse"],
            produces=["asset", "asset_check", "sensor", "job", "resource"],
        )

    @cached_property
    def loaded(self) -> LoadedProject:
        """The DDL directory, parsed once per component instance.

        Raises:
            DDLError: With every problem found in the directory.
        """
        return load(self.ddl_dir, default_database=self.default_database, twin=self.get_clickhouse().is_embedded)

    def get_translator(self) -> ChmvTranslator:
        """The translator of this component: ``translator_class`` (default :class:`ChmvTranslator`) with
        ``key_prefix`` and ``group_name`` applied. Override to customize in Python.

        Raises:
            ChmvError: ``translator_class`` cannot be imported or is not a ChmvTranslator subclass.
        """
        base = _import_translator(self.translator_class) if self.translator_class else ChmvTranslator
        prefix, group = tuple(self.key_prefix), self.group_name
        if not prefix and group is None:
            return base()

        class ConfiguredTranslator(base):  # type: ignore[valid-type, misc]
            def get_asset_key(self, ref: ObjectRef) -> AssetKey:
                key = super().get_asset_key(ref)
                return key.with_prefix(list(prefix)) if prefix else key

            def get_group_name(self, ref: ObjectRef) -> str:
                return group if group is not None else super().get_group_name(ref)

        return ConfiguredTranslator()

    def get_clickhouse(self) -> ClickHouseResource:
        """The ``clickhouse`` resource for ``dsn`` (default: as the workspace code location picks it)."""
        if self.dsn is None:
            return default_clickhouse()
        if self.dsn.startswith(_CHDB):
            return ClickHouseResource(dsn=self.dsn)
        if "@" in urlsplit(self.dsn).netloc:  # the UI shows the resource's configuration: a DSN as written
            raise ChmvError(
                f"the dsn of the chmv component of {self.ddl_dir} carries credentials ({redact_dsn(self.dsn)} with a "
                "user@): the Dagster UI would show them; set `username` and `password_env_var` (the environment "
                "variable holding the password) instead"
            )
        if redact_dsn(self.dsn) != self.dsn:  # a token in its query
            raise ChmvError(
                f"the dsn of the chmv component of {self.ddl_dir} carries a secret in its query "
                f"({redact_dsn(self.dsn)}): the Dagster UI would show it; leave `dsn` unset and put the whole DSN in "
                "$CHMV_CLICKHOUSE_DSN (the UI shows the variable's name)"
            )
        # the password's variable unset: no password (rather than a run failing at resource start)
        password = EnvVar(self.password_env_var) if os.environ.get(self.password_env_var) else None
        return ClickHouseResource(dsn=self.dsn, username=self.username, password=password)

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        """Assets, checks, sensors, jobs and resources of the DDL directory; never opens ClickHouse."""
        return build_definitions(self.loaded, clickhouse=self.get_clickhouse(), translator=self.get_translator())


def _import_translator(path: str) -> type[ChmvTranslator]:
    module_name, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ChmvError(f"translator_class {path!r} cannot be imported: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, ChmvTranslator)):
        raise ChmvError(f"translator_class {path!r} is not a subclass of ChmvTranslator")
    return cls
