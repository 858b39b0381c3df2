"""gpuhosts' thin Python language host reports no plugin package (tools/pulumi/cmd/pulumi-language-python
GetRequiredPackages): that holds only while the locked environment ships no Pulumi provider SDK, which Pulumi's host
would find by its pulumi-plugin.json and whose plugin the CLI would then install."""

from __future__ import annotations

import json
from importlib.metadata import distributions


def test_the_locked_environment_ships_no_provider_plugin_package():
    providers = []
    for dist in distributions():
        for file in dist.files or ():
            if file.name == "pulumi-plugin.json":
                declared = json.loads(file.locate().read_text())
                if declared.get("resource", True):
                    providers.append(f"{dist.metadata['Name']}: {file}")
    assert providers == [], "the language host must report these plugins: " + ", ".join(providers)
