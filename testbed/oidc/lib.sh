# Shared by start, token, rotate, lifetime, stop and inspect. Sourced, never run.
# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts

OIDC_DIR=${KUBEFLAVOR_OIDC_DIR:-${TMPDIR:-/tmp}/kubeflavor-oidc}
# Absolute, because it ends up in glewlwyd.conf and in the env file.
[[ $OIDC_DIR == /* ]] || OIDC_DIR=$PWD/$OIDC_DIR
OIDC_ENV=$OIDC_DIR/env
OIDC_PIDFILE=$OIDC_DIR/glewlwyd.pid
# Marks a state dir as ours, so that `stop --wipe` and a fresh `start` never
# delete a directory somebody pointed KUBEFLAVOR_OIDC_DIR at by mistake.
OIDC_MARK=$OIDC_DIR/.kubeflavor-oidc
# Written last by `start`: its absence means provisioning never finished.
OIDC_DONE=$OIDC_DIR/.provisioned
# The package's SQL creates this admin; the testbed is loopback-only, so its
# well-known password is kept rather than managed.
OIDC_ADMIN_USER="admin"
OIDC_ADMIN_PASSWORD=password

say() { printf 'kubeflavor-oidc: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Every request goes to 127.0.0.1 only; --noproxy keeps a CI proxy variable
# from ever routing it elsewhere.
ocurl() {
  curl -sS --noproxy '*' --connect-timeout 3 --max-time 20 --cacert "$OIDC_DIR/ca.pem" "$@"
}

oidc_pid_alive() {
  local pid
  [[ -f $OIDC_PIDFILE ]] || return 1
  pid=$(<"$OIDC_PIDFILE")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  # A stale pid file may name a recycled pid: only a process running our
  # config counts. (cmdline, not comm: right after launch it is still setsid.)
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF "glewlwyd -c $OIDC_DIR/glewlwyd.conf"
}

# Loads the env file written by `start` (port, issuers, client secrets...).
oidc_load_env() {
  [[ -f $OIDC_ENV ]] || die "no provider state in $OIDC_DIR (run start first)"
  set -a
  # shellcheck disable=SC1090
  . "$OIDC_ENV"
  set +a
}

# Serialises start/stop/rotate/lifetime on one state dir: parallel test processes
# (nextest) may all call start at once. The lock file sits beside the state
# dir because --wipe deletes the dir itself.
oidc_lock() {
  mkdir -p "$(dirname "$OIDC_DIR")"
  exec 9>"$OIDC_DIR.lock"
  flock -w 300 9 || die "timed out waiting for $OIDC_DIR.lock"
}

# --- admin REST API (session cookie of the package-created admin) ----------

oidc_admin_login() {
  local base=$1 code
  OIDC_JAR=$(mktemp "${TMPDIR:-/tmp}/kubeflavor-oidc-jar.XXXXXX")
  trap 'rm -f "$OIDC_JAR"' EXIT
  code=$(ocurl -o /dev/null -w '%{http_code}' -c "$OIDC_JAR" \
    -H 'Content-Type: application/json' \
    -d "{\"username\":\"$OIDC_ADMIN_USER\",\"password\":\"$OIDC_ADMIN_PASSWORD\"}" \
    "$base/api/auth/") || die "admin login: provider unreachable at $base"
  [[ $code == 200 ]] || die "admin login failed (HTTP $code)"
  OIDC_API_BASE=$base
}

# oidc_api METHOD PATH [JSON-BODY] -> response body on stdout; dies on non-2xx.
oidc_api() {
  local method=$1 path=$2 body=${3-} out code
  out=$(mktemp "${TMPDIR:-/tmp}/kubeflavor-oidc-api.XXXXXX")
  local args=(-X "$method" -b "$OIDC_JAR" -o "$out" -w '%{http_code}')
  if [[ -n $body ]]; then
    args+=(-H 'Content-Type: application/json' --data-binary "$body")
  fi
  code=$(ocurl "${args[@]}" "$OIDC_API_BASE/api$path") || { rm -f "$out"; die "$method $path: request failed"; }
  if [[ $code != 2* ]]; then
    say "$method $path -> HTTP $code: $(head -c 600 "$out")"
    rm -f "$out"
    exit 1
  fi
  cat "$out"
  rm -f "$out"
}

# --- signing keys ----------------------------------------------------------

# Prints a private RS256 JWK (JSON) with the given kid. glewlwyd only takes
# signing keys as a private JWKS when several must coexist (rotation), and
# Debian ships no PEM->JWK tool except rnbyc, so the RSA numbers are read from
# `openssl rsa -text` and base64url-encoded here.
oidc_new_rsa_jwk() {
  local kid=$1 pem
  pem=$(openssl genrsa 2048 2>/dev/null) || die "openssl genrsa failed"
  printf '%s\n' "$pem" | openssl rsa -noout -text 2>/dev/null | python3 -c '
import base64, json, re, sys
kid = sys.argv[1]
fields, cur = {}, None
for line in sys.stdin:
    m = re.match(r"^(\w+):\s*(\d+)?", line)
    if m and not line.startswith(" "):
        cur = m.group(1)
        if m.group(2):                      # publicExponent: 65537 (0x10001)
            fields[cur] = int(m.group(2)); cur = None
        else:
            fields[cur] = ""
    elif cur:
        fields[cur] += line.strip().replace(":", "")
def b64(v):
    n = v if isinstance(v, int) else int(v, 16)
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
names = {"n": "modulus", "e": "publicExponent", "d": "privateExponent",
         "p": "prime1", "q": "prime2", "dp": "exponent1", "dq": "exponent2",
         "qi": "coefficient"}
jwk = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid}
jwk.update({k: b64(fields[v]) for k, v in names.items()})
print(json.dumps(jwk))
' "$kid"
}

oidc_new_kid() {
  printf 'kf-%s-%s' "$(date -u +%Y%m%d%H%M%S)" "$(openssl rand -hex 3)"
}
