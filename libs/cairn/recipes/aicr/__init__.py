"""NVIDIA AICR's recipe data read, resolved and written as AICR does.

    catalog = load_aicr_catalog(Path("my-data"))            # an AICR data directory
    result = resolve(catalog, AicrCriteria(service="eks", accelerator="h100"))
    to_document(result)                                     # kind: RecipeResult

`cairn recipe show --data DIR --format aicr` prints that document; docs/recipes.md ("Using
AICR recipe data") maps every AICR field to Cairn's.
"""

from cairn.recipes.aicr.catalog import AicrCatalog, build_catalog, load_aicr_catalog
from cairn.recipes.aicr.datadir import DataFiles, read_data_dir
from cairn.recipes.aicr.model import (
    API_VERSION,
    AicrConstraint,
    AicrCriteria,
    ComponentRef,
    RecipeMetadata,
    RecipeMixin,
    RecipeResult,
    to_document,
)
from cairn.recipes.aicr.resolve import deployment_order, match, matches, resolve, specificity

__all__ = [
    "API_VERSION",
    "AicrCatalog",
    "AicrConstraint",
    "AicrCriteria",
    "ComponentRef",
    "DataFiles",
    "RecipeMetadata",
    "RecipeMixin",
    "RecipeResult",
    "build_catalog",
    "deployment_order",
    "load_aicr_catalog",
    "match",
    "matches",
    "read_data_dir",
    "resolve",
    "specificity",
    "to_document",
]
