#!/usr/bin/env bash
# Make a private CA and certificates for skurl's mutual TLS (docs/security.md), with openssl.
#   scripts/dev_certs.sh OUT_DIR [NAME ...]
# writes OUT_DIR/ca.pem + ca.key (the CA), and per NAME (default: skurl) NAME.pem + NAME.key:
# a certificate for both server and client use (each skurl process is both), valid for
# localhost, 127.0.0.1, ::1, NAME and the names in SKURL_CERT_SANS (comma separated, e.g.
# "DNS:skurl-sim-0.skurl,IP:10.0.0.5"). Also OUT_DIR/skurl-tls-secret.yaml: a Kubernetes
# Secret holding ca.pem and the first NAME's cert/key as tls.crt/tls.key.
# Set rpc.tls.cert=OUT_DIR/NAME.pem rpc.tls.key=OUT_DIR/NAME.key rpc.tls.ca=OUT_DIR/ca.pem.
# For tests and development: keep ca.key off production machines.
set -euo pipefail
out="${1:?usage: scripts/dev_certs.sh OUT_DIR [NAME ...]}"
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(skurl)
days="${SKURL_CERT_DAYS:-825}"
mkdir -p "$out"
umask 077
if [ ! -f "$out/ca.key" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$out/ca.key" -out "$out/ca.pem" \
    -days "$days" -subj "/CN=skurl dev CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
for name in "${names[@]}"; do
  sans="DNS:localhost,IP:127.0.0.1,IP:::1,DNS:${name}${SKURL_CERT_SANS:+,$SKURL_CERT_SANS}"
  ext="$(mktemp)"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$sans" > "$ext"
  openssl req -newkey rsa:2048 -nodes -keyout "$out/$name.key" -out "$out/$name.csr" \
    -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -CAcreateserial -out "$out/$name.pem" -days "$days" -extfile "$ext" 2>/dev/null
  rm -f "$ext" "$out/$name.csr"
done
first="${names[0]}"
b64() { base64 < "$1" | tr -d '\n'; }
cat > "$out/skurl-tls-secret.yaml" <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: skurl-tls
type: Opaque
data:
  ca.pem: $(b64 "$out/ca.pem")
  tls.crt: $(b64 "$out/$first.pem")
  tls.key: $(b64 "$out/$first.key")
YAML
echo "certificates in $out: ca.pem, ${names[*]/%/.pem} (keys beside them)"
