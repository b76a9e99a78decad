{{/* NOTES.txt body; kept in a helper so tests can render it without a cluster. */}}
{{- define "pfs.notes" -}}
pfs {{ .Chart.AppVersion }} is deployed: 1 Dask scheduler and {{ .Values.worker.replicas }} worker(s)
({{ .Values.worker.threads }} Dask threads, PFS_THREADS={{ .Values.worker.pfsThreads | default "auto" }} each).
{{- if .Values.sharedStorage.enabled }}
Workers mount the shared file system at {{ .Values.sharedStorage.mountPath }}{{ if .Values.sharedStorage.readOnly }} (read-only){{ end }}.
{{- if .Values.sharedStorage.readOnly }}
The mount is read-only: write manifests somewhere writable (an s3:// URL or a volume from worker.extraVolumes).
{{- end }}
{{- else }}
WARNING: sharedStorage.enabled is false: workers see no shared file system, only object stores (s3://, sftp://).
{{- end }}

In-cluster scheduler address: {{ include "pfs.schedulerAddress" . }}
                   (FQDN):   {{ include "pfs.protocol" . }}://{{ include "pfs.schedulerFQDN" . }}:{{ .Values.scheduler.service.port }}
{{- $ns := .Release.Namespace }}
{{- $worker := printf "%s-worker" (include "pfs.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- if .Values.tls.enabled }}

TLS: the scheduler accepts only clients with a certificate signed by the cluster's CA (mutual TLS).
{{- if .Values.tls.existingSecret }}
Client certificate: Secret {{ include "pfs.tlsClientSecretName" . }} (yours: tls.existingSecret).
{{- else }}
Client certificate: Secret {{ include "pfs.tlsClientSecretName" . }} (generated, kept across upgrades).
{{- end }}
{{- end }}

1. Check the connection from your machine:
{{- if .Values.tls.enabled }}
{{- $get := printf "kubectl --namespace %s get secret %s -o jsonpath=" $ns (include "pfs.tlsClientSecretName" .) }}

   {{ $get }}'{.data.ca\.crt}' | base64 -d > pfs-ca.crt
   {{ $get }}'{.data.tls\.crt}' | base64 -d > pfs-tls.crt
   {{ $get }}'{.data.tls\.key}' | base64 -d > pfs-tls.key
   chmod 600 pfs-tls.key
   export PFS_TLS_CA_FILE=$PWD/pfs-ca.crt PFS_TLS_CERT=$PWD/pfs-tls.crt PFS_TLS_KEY=$PWD/pfs-tls.key
{{- end }}

   kubectl --namespace {{ $ns }} port-forward svc/{{ include "pfs.schedulerName" . }} {{ .Values.scheduler.service.port }}:{{ .Values.scheduler.service.port }} {{ .Values.scheduler.service.dashboardPort }}:{{ .Values.scheduler.service.dashboardPort }}
   pfs workers --scheduler {{ include "pfs.protocol" . }}://localhost:{{ .Values.scheduler.service.port }}
   Dashboard: http://localhost:{{ .Values.scheduler.service.dashboardPort }}/status

2. Run pfs from here with the paths as the workers see them: a path that does not exist on this
   machine makes the command's driver run on the cluster (--driver auto), and pfs shows its progress
   and result here (docs/deploy.md, "Remote driving"):

   export PFS_SCHEDULER={{ include "pfs.protocol" . }}://localhost:{{ .Values.scheduler.service.port }}
   pfs scan {{ .Values.sharedStorage.mountPath }}/project -o {{ .Values.sharedStorage.mountPath }}/.pfs/manifests/project
   pfs du {{ .Values.sharedStorage.mountPath }}/.pfs/manifests/project --by user

   Or inside the cluster, in a worker pod (it mounts the file system and holds a certificate):

   kubectl --namespace {{ $ns }} exec -it deploy/{{ $worker }} -- \
     pfs scan {{ .Values.sharedStorage.mountPath }}/project -o {{ .Values.sharedStorage.mountPath }}/.pfs/manifests/project --no-progress
{{- if .Values.job.enabled }}

3. The Job runs: pfs {{ join " " .Values.job.args }}
   kubectl --namespace {{ $ns }} logs -f job/{{ include "pfs.jobName" . }}
   `helm upgrade` keeps it unless the Job changes; set job.runId to run the same arguments again.
{{- end }}
{{- if .Values.jupyter.enabled }}

Jupyter (PFS_SCHEDULER is set in its environment):
   kubectl --namespace {{ .Release.Namespace }} port-forward svc/{{ printf "%s-jupyter" (include "pfs.fullname" .) | trunc 63 | trimSuffix "-" }} {{ .Values.jupyter.service.port }}:{{ .Values.jupyter.service.port }}
   Token: kubectl --namespace {{ .Release.Namespace }} get secret {{ default (printf "%s-jupyter" (include "pfs.fullname" .) | trunc 63 | trimSuffix "-") .Values.jupyter.existingSecret }} -o jsonpath='{.data.token}' | base64 -d
{{- end }}
{{- if .Values.airflowConnection.enabled }}

Airflow: the Secret {{ printf "%s-airflow-connection" (include "pfs.fullname" .) | trunc 63 | trimSuffix "-" }} holds AIRFLOW_CONN_{{ upper .Values.airflowConnection.connId }}
(conn type pfs_dask). Copy it to Airflow's namespace if different and add it to the Airflow workers, e.g. with the
official Airflow chart:
   extraEnvFrom: |
     - secretRef:
         name: {{ printf "%s-airflow-connection" (include "pfs.fullname" .) | trunc 63 | trimSuffix "-" }}
Tasks then use conn_id="{{ .Values.airflowConnection.connId }}".
{{- if and .Values.tls.enabled .Values.tls.existingSecret }}
Its extras name certificate files under {{ .Values.airflowConnection.tlsMountPath }}: mount Secret {{ include "pfs.tlsClientSecretName" . }} there.
{{- else if .Values.tls.enabled }}
Its extras carry the client certificate and key (protocol tls): treat the Secret as a credential.
{{- end }}
{{- end }}
{{- if .Values.networkPolicy.enabled }}

NetworkPolicy: only this release's workers, Job and Jupyter{{ if .Values.networkPolicy.extraIngress }} and networkPolicy.extraIngress peers{{ end }} reach the scheduler.
Clients outside that list (e.g. Airflow) must be added to networkPolicy.extraIngress; `kubectl port-forward` works regardless.
{{- else }}

WARNING: networkPolicy.enabled is false: any pod in the cluster can reach the scheduler{{ if not .Values.tls.enabled }} and, without TLS, run code on the workers{{ end }}.
{{- end }}
{{- if not .Values.tls.enabled }}
WARNING: tls.enabled is false: whoever reaches port {{ .Values.scheduler.service.port }} runs code as the data owner on the workers.
{{- end }}
{{- end }}
