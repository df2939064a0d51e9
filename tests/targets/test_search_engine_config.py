"""target.url and target.options of the OpenSearch and Elasticsearch targets: parsing, validation
with errors that name the key, and secrets that never show."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkindex.errors import ConfigError
from sparkindex.targets.elasticsearch import ElasticsearchTarget, ElasticsearchTargetConfig
from sparkindex.targets.opensearch import OpenSearchTarget, OpenSearchTargetConfig
from sparkindex.targets.registry import open_target

SECRET = "s3cr3t-Pa55"


def os_config(url: str, **options: object) -> OpenSearchTargetConfig:
    return OpenSearchTargetConfig.from_url(url, Path("/base"), dict(options))


def test_plain_url_exactly_as_written() -> None:
    c = os_config("opensearch://127.0.0.1:9201")
    assert c.host_urls() == ["http://127.0.0.1:9201"]
    assert not c.tls and c.username is None and c.password is None


def test_default_port_tls_scheme_prefix_and_several_hosts() -> None:
    c = os_config("opensearchs://node1,node2:9300,[::1]:9400/search-proxy/")
    assert c.host_urls() == [
        "https://node1:9200/search-proxy",
        "https://node2:9300/search-proxy",
        "https://[::1]:9400/search-proxy",
    ]
    assert os_config("opensearch://h", tls=True).host_urls() == ["https://h:9200"]


def test_credentials_from_the_url_are_decoded_and_hidden() -> None:
    c = os_config(f"opensearch://indexer:{SECRET.replace('5', '%35')}@h:9200")
    assert c.username == "indexer" and c.password is not None and c.password.get_secret_value() == SECRET
    assert SECRET not in repr(c) and SECRET not in str(c) and SECRET not in c.describe()
    target = OpenSearchTarget(c)
    assert SECRET not in repr(target)


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("opensearch://h:notaport", {}, "bad port"),
        ("opensearch://h:9200?timeout=5", {}, "target.options"),
        ("elasticsearch://h:9200", {}, "is not a opensearch:// or opensearchs:// URL"),
        ("opensearch://", {}, "names no host"),
        ("opensearch://h", {"request_timeout_s": 0}, "target.options.request_timeout_s"),
        ("opensearch://h", {"wait_for_status": "blue"}, "target.options.wait_for_status"),
        ("opensearch://h", {"max_bulk_byts": 10}, "target.options.max_bulk_byts: not an option"),
        ("opensearch://h", {"api_key": "abc"}, "target.options.api_key: not an option"),
        ("opensearch://u:p@h", {"password": "x"}, "target.options.password: also given in target.url"),
        ("opensearch://h", {"ca_certs": "missing.pem"}, "target.options.ca_certs"),
        ("opensearch://h", {"verify_certs": False}, "only apply to TLS"),
        ("opensearchs://h", {"tls": False}, "target.options.tls"),
    ],
)
def test_bad_urls_and_options_name_what_and_where(url: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        os_config(url, **options)


def test_errors_never_show_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        os_config(f"opensearch://u:{SECRET}@h:bad")
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        os_config("opensearch://h", pasword=SECRET)  # a misspelt key: its value is not echoed either
    assert SECRET not in str(caught.value) and "target.options.pasword" in str(caught.value)


def test_ca_bundle_is_relative_to_the_pipeline_file(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    c = OpenSearchTargetConfig.from_url("opensearchs://h", tmp_path, {"ca_certs": "ca.pem"})
    assert c.ca_certs == tmp_path / "ca.pem"


def test_elasticsearch_api_key_is_secret_and_excludes_basic_auth() -> None:
    c = ElasticsearchTargetConfig.from_url("elasticsearchs://h:9243", Path("."), {"api_key": SECRET})
    assert c.api_key is not None and c.api_key.get_secret_value() == SECRET and SECRET not in repr(c)
    with pytest.raises(ConfigError, match="api_key and a username/password exclude each other"):
        ElasticsearchTargetConfig.from_url("elasticsearch://u:p@h", Path("."), {"api_key": SECRET})


def test_registry_picks_the_backend_by_scheme(tmp_path: Path) -> None:
    assert isinstance(open_target("opensearch://h:1", tmp_path), OpenSearchTarget)
    assert isinstance(open_target("opensearchs://h:1", tmp_path), OpenSearchTarget)
    assert isinstance(open_target("elasticsearch://h:1", tmp_path), ElasticsearchTarget)
    assert isinstance(open_target("elasticsearchs://h:1", tmp_path, {"verify_certs": False}), ElasticsearchTarget)
    with pytest.raises(ConfigError, match="supported: tantivy, opensearch") as caught:
        open_target(f"solr://u:{SECRET}@h", tmp_path)
    assert SECRET not in str(caught.value)
