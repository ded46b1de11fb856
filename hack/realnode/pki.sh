#!/usr/bin/env bash
# pki.sh RN NODE NODE_IP KUBECTL: the node's CA, serving and client
# certificates (openssl) and one kubeconfig per component, under RN.
set -euo pipefail
RN=$1 NODE=$2 NODE_IP=$3 KUBECTL=$4
cd "$RN/pki"
openssl genrsa -out ca.key 2048
openssl req -x509 -new -key ca.key -subj /CN=realnode-ca -days 3650 -out ca.crt

# client FILE CN [O]: a client certificate signed by the CA.
client() {
  openssl genrsa -out "$1.key" 2048
  openssl req -new -key "$1.key" -subj "/CN=$2${3:+/O=$3}" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out "$1.crt" \
    -extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment')
}
client admin admin system:masters
client kube-controller-manager system:kube-controller-manager
client kube-scheduler system:kube-scheduler
client kube-proxy system:kube-proxy
# The Node authorizer and NodeRestriction need exactly this CN and O.
client kubelet "system:node:$NODE" system:nodes
client apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
openssl genrsa -out apiserver.key 2048
openssl req -new -key apiserver.key -subj /CN=kube-apiserver -out apiserver.csr
# 10.96.0.1 is the kubernetes Service pods reach the API server by.
openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out apiserver.crt \
  -extfile <(printf "extendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\nsubjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:10.96.0.1,IP:$NODE_IP")
openssl genrsa -out sa.key 2048
openssl rsa -in sa.key -pubout -out sa.pub
for n in admin kube-controller-manager kube-scheduler kube-proxy kubelet; do
  f=$RN/kubeconfig/$n.conf
  KUBECONFIG=$f "$KUBECTL" config set-cluster c --server="https://$NODE_IP:6443" --certificate-authority=ca.crt --embed-certs
  KUBECONFIG=$f "$KUBECTL" config set-credentials u --client-certificate="$n.crt" --client-key="$n.key" --embed-certs
  KUBECONFIG=$f "$KUBECTL" config set-context default --cluster=c --user=u
  KUBECONFIG=$f "$KUBECTL" config use-context default
done
