"""Build glue pyproject.toml cannot express: ship the top-level ``conf/`` tree inside the package.

The repository keeps the Hydra config tree at its top level (``conf/``, where a reader looks
for it); a wheel or a plain ``pip install .`` maps it into the package as ``wildtrace/conf``
(package data), and ``wildtrace.app.find_conf_dir`` reads whichever exists. Everything else
about the project lives in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    # Every wildtrace package, found (so a new subpackage needs no edit here), plus conf/ mapped in.
    packages=[*find_packages(include=["wildtrace", "wildtrace.*"]), "wildtrace.conf"],
    package_dir={"wildtrace.conf": "conf"},
    package_data={
        "wildtrace": ["data/sample/*.json", "data/sample/corpus/*.txt"],
        "wildtrace.conf": ["*.yaml", "**/*.yaml"],
    },
    include_package_data=False,
)
