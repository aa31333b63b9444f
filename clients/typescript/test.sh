#!/usr/bin/env bash
# Builds the TypeScript client and runs its tests (node's built-in runner)
# against the real sidecar: STEPWELL_BIN, default
# ${CARGO_TARGET_DIR:-/root/.cache/stepwell/target}/debug/stepwell.
# Works from any directory.
#
# Two passes: every test against a plaintext sidecar, then the shared
# scenarios and test/secure-checks.ts against a sidecar serving TLS with
# client certificates and bearer-token auth, from a throwaway CA,
# certificates, tokens and auth file made here with openssl.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@connectrpc/connect-node ] || [ ! -x node_modules/.bin/tsc ] || [ package.json -nt node_modules/.package-lock.json ]; then
  npm install --no-audit --no-fund
fi
rm -rf dist
npx --no-install tsc -p .

echo "== pass 1: plaintext sidecar"
node --test dist/test/*.test.js

# Writes a CA, a server certificate for localhost/127.0.0.1, a client
# certificate, two tokens and the auth file granting them into $1.
make_security_dir() {
  local d="$1"
  (
    cd "$d"
    umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
      -subj "/CN=stepwell test CA" -keyout ca.key -out ca.pem \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    issue() { # name, subjectAltName, extendedKeyUsage
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$1" \
        -keyout "$1.key" -out "$1.csr" 2>/dev/null
      printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nsubjectAltName=%s\nextendedKeyUsage=%s\n' "$2" "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    }
    issue server "DNS:localhost,IP:127.0.0.1" serverAuth
    issue client "URI:spiffe://stepwell.test/typescript-client" clientAuth
    openssl rand -hex 32 >token
    openssl rand -hex 32 >reader-token
    sha() { tr -d '\n' <"$1" | sha256sum | cut -d' ' -f1; }
    cat >auth.toml <<TOML
[[principals]]
id = "scenarios"
token_sha256 = "$(sha token)"
grants = [{ namespace = "*", role = "admin" }]

[[principals]]
id = "reader"
token_sha256 = "$(sha reader-token)"
grants = [{ namespace = "*", role = "read" }]
TOML
  )
}

security_dir="$(mktemp -d "${TMPDIR:-/tmp}/stepwell-ts-tls-XXXXXX")"
trap 'rm -rf "$security_dir"' EXIT
make_security_dir "$security_dir"
echo "== pass 2: TLS with client certificates and token auth"
STEPWELL_TEST_SECURITY_DIR="$security_dir" node --test dist/test/scenarios.test.js dist/test/secure-checks.js
