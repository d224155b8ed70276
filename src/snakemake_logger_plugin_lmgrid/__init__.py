"""lmgrid's Snakemake logger plugin, `snakemake --logger lmgrid` (`make run` uses it; lmgrid.orchestration.terminal
holds the code and says what it shows and why lmgrid has its own plugin).

Why a second, top-level package: Snakemake finds logger plugins by module name only.  Its registry
(snakemake_interface_common.plugin_registry.PluginRegistryBase.collect_plugins) walks pkgutil.iter_modules() over
sys.path and imports every top-level *package* named `snakemake_logger_plugin_<name>`; entry points are not read,
and a module inside lmgrid is never seen.  Installed from src/ (setuptools finds both packages; the editable
install's .pth puts src/ on sys.path), this package is found wherever lmgrid is importable.  Snakemake imports it
on every start, so it imports nothing heavy: lmgrid.orchestration.terminal loads lmgrid's run records lazily.
"""
from lmgrid.orchestration.terminal import LogHandler

__all__ = ["LogHandler"]
