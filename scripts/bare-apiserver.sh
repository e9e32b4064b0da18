#!/usr/bin/env bash
# A bare Kubernetes API server on this machine for the e2e suite: etcd and kube-apiserver, nothing else
# (no controller manager, no kubelets, no scheduler). Both listen on 127.0.0.1 only; their data,
# certificates and logs live in one temporary directory. Nothing is downloaded: the binaries come from
# $ETCD and $KUBE_APISERVER, else from PATH.
#
# Usage:
#   scripts/bare-apiserver.sh start   # prints `export KUBECONFIG=...`; then `KUBECONFIG=... make e2e`
#   scripts/bare-apiserver.sh stop    # stops both and removes the directory
#   scripts/bare-apiserver.sh status
#
# Environment: ETCD, KUBE_APISERVER (binaries), BARE_DIR (state directory; default a new one under
# $TMPDIR, remembered in $BARE_STATE), BARE_PORT (the API server's port, default 6443), ETCD_PORT
# (default 2379), BARE_TIMEOUT (seconds to wait for readiness, default 90).
#
# The client credential is a certificate signed by a CA made here, in the group system:masters, so
# RBAC lets the suite do anything; the service-account key pair is made here too.
set -euo pipefail

state_file=${BARE_STATE:-${TMPDIR:-/tmp}/gpufleet-bare-apiserver.dir}
port=${BARE_PORT:-6443}
etcd_port=${ETCD_PORT:-2379}
timeout=${BARE_TIMEOUT:-90}

die() {
  echo "bare-apiserver: $*" >&2
  exit 1
}

binary() { # binary ENV_VALUE NAME: the path of a binary given by the environment or found on PATH
  local given=$1 name=$2 found
  if [ -n "$given" ]; then
    [ -x "$given" ] || die "$name: $given is not an executable file"
    echo "$given"
    return
  fi
  local variable=${name^^}
  variable=${variable//-/_} # kube-apiserver is given as KUBE_APISERVER
  found=$(command -v "$name" 2>/dev/null) || die "$name not found: set $variable or put it on PATH"
  echo "$found"
}

certificates() { # certificates DIR: a CA, the server's serving cert, an admin client cert, an SA key pair
  local dir=$1
  cd "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=gpufleet-bare-ca" \
    -keyout ca.key -out ca.crt 2>/dev/null
  cat >server.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc
EOF
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout server.key -out server.csr 2>/dev/null
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile server.ext -out server.crt 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
    >client.ext
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=gpufleet-e2e-admin" \
    -keyout admin.key -out admin.csr 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile client.ext -out admin.crt 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cd - >/dev/null
}

kubeconfig() { # kubeconfig DIR: a kubeconfig with the CA and the admin client certificate embedded
  local dir=$1
  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bare
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(base64 -w0 <"$dir/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 <"$dir/admin.crt")
    client-key-data: $(base64 -w0 <"$dir/admin.key")
contexts:
- name: bare
  context: {cluster: bare, user: admin}
current-context: bare
EOF
}

wait_ready() { # wait_ready DIR: until /readyz answers ok, or the timeout
  local dir=$1 deadline=$((SECONDS + timeout))
  until curl -sf --cacert "$dir/ca.crt" --cert "$dir/admin.crt" --key "$dir/admin.key" \
    "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$dir/kube-apiserver.pid")" 2>/dev/null; then
      tail -n 30 "$dir/kube-apiserver.log" >&2
      die "kube-apiserver exited (log: $dir/kube-apiserver.log)"
    fi
    [ "$SECONDS" -lt "$deadline" ] || die "kube-apiserver not ready after ${timeout}s (log: $dir/kube-apiserver.log)"
    sleep 1
  done
}

start() {
  local etcd apiserver dir
  etcd=$(binary "${ETCD:-}" etcd)
  apiserver=$(binary "${KUBE_APISERVER:-}" kube-apiserver)
  command -v openssl >/dev/null || die "openssl not found"
  command -v curl >/dev/null || die "curl not found"
  if [ -f "$state_file" ] && [ -d "$(cat "$state_file")" ]; then
    die "already started in $(cat "$state_file"); run '$0 stop' first"
  fi
  dir=${BARE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-bare.XXXXXX")}
  mkdir -p "$dir/etcd"
  echo "$dir" >"$state_file"
  certificates "$dir"

  "$etcd" --name bare --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster "bare=http://127.0.0.1:$((etcd_port + 1))" \
    >"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"

  "$apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --tls-cert-file="$dir/server.crt" --tls-private-key-file="$dir/server.key" \
    --client-ca-file="$dir/ca.crt" \
    --service-account-key-file="$dir/sa.pub" --service-account-signing-key-file="$dir/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=RBAC \
    --cert-dir="$dir/certs" \
    >"$dir/kube-apiserver.log" 2>&1 &
  echo $! >"$dir/kube-apiserver.pid"

  kubeconfig "$dir"
  wait_ready "$dir"
  echo "export KUBECONFIG=$dir/kubeconfig"
}

stop() {
  [ -f "$state_file" ] || {
    echo "bare-apiserver: not started" >&2
    return 0
  }
  local dir pid
  dir=$(cat "$state_file")
  for name in kube-apiserver etcd; do
    if [ -f "$dir/$name.pid" ]; then
      pid=$(cat "$dir/$name.pid")
      if kill "$pid" 2>/dev/null; then
        for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
      fi
    fi
  done
  case "$dir" in
  */gpufleet-bare.*) rm -rf "$dir" ;;  # only a directory this script made
  esac
  rm -f "$state_file"
}

status() {
  [ -f "$state_file" ] || {
    echo "not started"
    return 1
  }
  local dir
  dir=$(cat "$state_file")
  for name in etcd kube-apiserver; do
    if kill -0 "$(cat "$dir/$name.pid" 2>/dev/null)" 2>/dev/null; then echo "$name: running"; else echo "$name: stopped"; fi
  done
  echo "export KUBECONFIG=$dir/kubeconfig"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*) die "usage: $0 start|stop|status" ;;
esac
