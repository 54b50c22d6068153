"""The one settings class, a module per section (``RAGSERVE_<SECTION>__*``), at the ground floor: this package
imports nothing else of ragserve. Every knob is an environment variable with the ``RAGSERVE_`` prefix; nested
sections use ``__`` (``RAGSERVE_LIMITS__MAX_DOCUMENTS_PER_REQUEST=500``). A ``RAGSERVE_`` variable that names no
setting stops start-up, naming the nearest valid one (a typo is never silently ignored).

The settings' own types live here too, so nothing below reaches up for them: the runners' engine arguments
(:mod:`.engine`), runner URL lists (:mod:`.targets`), API key entries and the tenant field rule (:mod:`.keys`)
and scopes (:mod:`.scopes`)."""

from service.config.common import CLIENT_VARIABLES, ENV_PREFIX, NOT_SETTINGS, NOT_SETTINGS_PREFIXES
from service.config.context import ContextSettings
from service.config.fetch import FetchSettings
from service.config.generation import GenerationSettings
from service.config.indexer import IndexerSettings
from service.config.ingest import IngestSettings
from service.config.limits import Limits
from service.config.media import MediaSettings
from service.config.ocr import OcrSettings
from service.config.otel import OtelSettings
from service.config.qdrant import QdrantSettings
from service.config.quality import QualitySettings, QueryLogSettings
from service.config.query_cache import QueryCacheSettings
from service.config.runners import RunnerSettings
from service.config.search import SearchSettings
from service.config.settings import Settings, UnknownSetting, check_environment, get_settings, setting_names
from service.config.upstream import PRIORITY_SCHEDULED_RUNNERS, UpstreamSettings
from service.config.vision import VisionSettings

__all__ = [
    "CLIENT_VARIABLES", "ENV_PREFIX", "NOT_SETTINGS", "NOT_SETTINGS_PREFIXES", "PRIORITY_SCHEDULED_RUNNERS",
    "ContextSettings", "FetchSettings", "GenerationSettings", "IndexerSettings", "IngestSettings", "Limits",
    "MediaSettings", "OcrSettings", "OtelSettings", "QdrantSettings", "QualitySettings", "QueryCacheSettings",
    "QueryLogSettings", "RunnerSettings",
    "SearchSettings", "Settings", "UnknownSetting", "UpstreamSettings", "VisionSettings", "check_environment",
    "get_settings", "setting_names",
]
