"""Interface shapes derived from the service results (sandboxes/contract/results.py).

An MCP output model or a REST serializer's model is declared as a Shape of a result: the
fields, their types and descriptions come from the result; the declaration only chooses the
fields, renames where an interface has always named a field differently (MCP's command_id /
task_id for a command's id) and adds the interface's own fields. So a result is described once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from pydantic import AliasChoices, AliasPath, BaseModel, ConfigDict, Field

# The metaclass of pydantic models: a Shape's fields are filled in before pydantic reads them.
from pydantic._internal._model_construction import ModelMetaclass
from pydantic.fields import FieldInfo


class ShapeMeta(ModelMetaclass):
    """Fills a Shape subclass with fields of its `source` result before pydantic builds it."""

    def __new__(
        mcs,
        cls_name: str,
        bases: tuple[type[Any], ...],
        namespace: dict[str, Any],
        source: type[BaseModel] | None = None,
        fields: str | Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        rename: Mapping[str, str] | None = None,
        types: Mapping[str, Any] | None = None,
        describe: Mapping[str, str | None] | None = None,
        **kwargs: Any,
    ) -> type:
        if source is not None:
            _derive(namespace, source, fields, exclude, dict(rename or {}), types, describe)
        return super().__new__(mcs, cls_name, bases, namespace, **kwargs)


def _derive(
    namespace: dict[str, Any],
    source: type[BaseModel],
    fields: str | Sequence[str] | None,
    exclude: Sequence[str],
    rename: dict[str, str],
    types: Mapping[str, Any] | None,
    describe: Mapping[str, str | None] | None,
) -> None:
    own = dict(namespace.get("__annotations__", {}))
    if isinstance(fields, str):  # "a b c": the names in order, separated by spaces
        fields = fields.split()
    if fields is None:
        as_named = {origin: name for name, origin in rename.items()}
        names = [as_named.get(f, f) for f in source.model_fields if f not in exclude]
        names += [f for f in own if f not in names]
    else:
        names = list(fields)
    unknown = [
        f for f in [*names, *exclude] if f not in own and not _field(source, rename.get(f, f))
    ]
    if unknown:
        raise TypeError(f"{source.__name__} has no field(s) {', '.join(unknown)}")
    annotations: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in names:
        if name in own:  # the interface's own field, declared in the class body
            annotations[name] = own[name]
            continue
        origin = rename.get(name, name)
        info = _field(source, origin)
        assert info is not None
        annotations[name] = (types or {}).get(name, info.annotation)
        alias = None
        if origin != name:
            alias = AliasChoices(name, AliasPath(*origin.split(".")) if "." in origin else origin)
        # Required, whatever the result's default: a result always has every field.
        namespace[name] = Field(
            description=(describe or {}).get(name, info.description), validation_alias=alias
        )
        sources[name] = origin
    namespace["__annotations__"] = annotations
    namespace["view_sources"] = sources


def _field(model: type[BaseModel], origin: str) -> FieldInfo | None:
    """The field `origin` names: "stdout", or "result.stdout" for a field of a nested result."""
    head, _, rest = origin.partition(".")
    info = model.model_fields.get(head)
    if info is None or not rest:
        return info
    nested = info.annotation
    if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
        return None
    return _field(nested, rest)


class Shape(BaseModel, metaclass=ShapeMeta):
    """An interface's view of a result, declared with class keywords:

        class Command(Shape, source=CommandResult, rename={"command_id": "id"},
                      exclude=("kind",)):
            extra_field: str = Field(description="...")   # the interface's own fields

    source: the result type; fields: the view's fields in order, a list or one string of
    names separated by spaces (default: the source's,
    minus `exclude`, then the class's own); rename: {view name: source field, or
    "result.stdout" for a field of a nested result}; types:
    annotation overrides (e.g. a nested view); describe: description overrides. Descriptions
    come from the source. A view validates from a result's attributes (`model_validate`), and
    `render()` adds the interface's own fields.
    """

    model_config = ConfigDict(from_attributes=True, validate_by_name=True)
    # view field -> the result attribute it is read from
    view_sources: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The keywords (source=..., fields=...) are consumed by the metaclass.
        super().__init_subclass__(**kwargs)


M = TypeVar("M", bound=Shape)


def render(model: type[M], result: Any, **extra: Any) -> M:
    """`result` shown as `model` (a Shape), with the interface's own fields in `extra`."""
    values = {
        name: _read(result, origin)
        for name, origin in model.view_sources.items()
        if name not in extra
    }
    return model(**values, **extra)


def _read(result: Any, origin: str) -> Any:
    for attribute in origin.split("."):
        result = getattr(result, attribute)
    return result


__all__ = ["Shape", "ShapeMeta", "render"]
