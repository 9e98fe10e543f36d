"""A secret that the option, the XML element or the query's field before it
names: `--password VALUE`, `<password>...</password>`, `?password=...&`. Each
was missed before review, and each has look-alikes that name no secret (a
help text's metavar, a flag beside another option, a form's verdict)."""

from __future__ import annotations

import pytest

from toolbus.scanning import ContentScanner


@pytest.mark.parametrize(
    ("text", "left"),
    [
        ("mysqladmin --password hunter2 status", "hunter2"),
        ("docker run app --db-password=S3cret! --port 80", "S3cret!"),
        ("openssl enc -aes256 -pass pass:S3cret99 -in f", "S3cret99"),
        ("openssl rsa -passin pass:hunter2! -in k", "hunter2!"),
        ("keytool -storepass hunter22 -alias x", "hunter22"),
        ("aws-cli --api-key sk_live_4eC39HqLyjWDarjtT1zdp7dc --region eu", "sk_live_4eC39Hq"),
        ("<password>sunshine</password>", "sunshine"),
        ('<db:Password type="plain">S3cret!</db:Password>', "S3cret!"),
        ("<password><![CDATA[hunter2!]]></password>", "hunter2!"),
        ("<SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY</SecretAccessKey>", "wJalrX"),
        ("GET /login?password=S3cretPass99&user=bob", "S3cretPass99"),
        ("https://x/login?password=hunter2&user=bob", "hunter2"),
        ("grant_type=password&username=bob&password=hunter2&client_id=web", "hunter2"),
        ("user=bob&pwd=s3cret&remember=1", "s3cret"),
        ("GET /api?api_key=abc123&format=json", "abc123"),
        ("GET /?token=a1b2c3d&page=2", "a1b2c3d"),
        ("GET /login?user=a&password%3DS3cretPass99", "S3cretPass99"),
    ],
)
def test_a_secret_named_by_an_option_an_element_or_a_field(
    scanner: ContentScanner, text: str, left: str
) -> None:
    out = scanner.text(text)
    assert left not in out and "[REDACTED:secret]" in out, out
    # A query's or a form's value ends at the next "&": the next field shows.
    for field in ("user=bob", "format=json", "page=2", "client_id=web", "remember=1"):
        assert field in out or field not in text, out


@pytest.mark.parametrize(
    "text",
    [
        # A secret word's value elsewhere runs on past "&" (it was cut there,
        # and what was left too short to count).
        "password: aB3&xY9=kLmN2",
        "DB_PASSWORD=Xy7&k=Qz9!pLw",
        "token: abcDEF&ghi=JKLmno123456",
    ],
)
def test_a_value_after_a_secret_word_keeps_its_ampersands(
    scanner: ContentScanner, text: str
) -> None:
    value = text.split(":", 1)[-1].split("=", 1)[-1].strip()
    out = scanner.text(text)
    assert value not in out and not [part for part in value.split("&") if part in out], out


@pytest.mark.parametrize(
    "text",
    [
        "GET /search?password=x&user=bob&page=2",
        "set --password interactively",
        "docker login --password-stdin < pw.txt",
        "restic --password-file /run/secrets/pw backup",
        "gcloud list --page-token Zx9kQ2vL7pW3mN8bQ",
        "deploy --token $DEPLOY_TOKEN",
        "psql --password",
        # Help text: a metavar, a description set off by spaces, a flag's neighbour.
        "  --password TEXT        The password.",
        "usage: deploy.py [-h] [--db-password DB_PASSWORD] [--admin-pass ADMIN_PASS]",
        "-p, --password [arg]",
        "--client-secret CLIENT_SECRET",
        "  --no-password          Never prompt for a password",
        "ansible-playbook --ask-pass --become site.yml",
        "pg_dump --no-password --format=custom mydb",
        # What a secret option names: a secret's name, a spec, a path, an ARN.
        "docker build --secret id=npmrc,src=$HOME/.npmrc .",
        "docker service create --secret db_password_v2 nginx",
        "gcloud functions deploy f --secret projects/123456/secrets/db-pass",
        "aws sts --credentials arn:aws:iam::123456789012:role/Deployer",
        # Where openssl reads a password from.
        "openssl enc -pass env:ENC_PASS",
        "openssl enc -pass file:/etc/keys/pass.txt",
        # Elements: a placeholder, another word's name, prose, a listing's token.
        "<password>${DB_PASSWORD}</password>",
        "<passwordHash>abc</passwordHash>",
        "<password>Your password must be at least 8 characters</password>",
        "<NextToken>Zx9kQ2vL7pW3mN8bQ2vL7pW3</NextToken>",
        "<syncToken>Zx9kQ2vL7pW3mN8bQ2vL7pW3</syncToken>",
        # A form's verdict on a password.
        '{"errors": {"password": "Invalid"}}',
        "?max_tokens=100&page_token=Zx9kQ2vL7pW3mN8bQ",
    ],
)
def test_options_elements_and_fields_that_hold_no_secret(
    scanner: ContentScanner, text: str
) -> None:
    assert scanner.text(text) == text
