#!/usr/bin/env bash
# The first install's TLS Secrets, made with openssl: a CA, pelwarden's
# serving certificate for the host KEDA dials, and KEDA's client
# certificate, each Secret with the CA as ca.crt.
set -euo pipefail
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
key ca.key
openssl req -x509 -new -key ca.key -days 730 -subj /CN=pelwarden-ca -out ca.crt \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
sign() { # name, common name, extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile "$1.ext" -out "$1.crt"
}
sign server pelwarden.pelwarden.svc \
  'subjectAltName=DNS:pelwarden.pelwarden.svc,DNS:pelwarden.pelwarden.svc.cluster.local
extendedKeyUsage=serverAuth'
sign client keda-operator 'extendedKeyUsage=clientAuth'
kubectl -n pelwarden create secret generic pelwarden-grpc-tls \
  --from-file=tls.crt=server.crt --from-file=tls.key=server.key --from-file=ca.crt
kubectl -n jobs create secret generic pelwarden-keda-client \
  --from-file=tls.crt=client.crt --from-file=tls.key=client.key --from-file=ca.crt
