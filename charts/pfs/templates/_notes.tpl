{{/* NOTES.txt body; kept in a helper so tests can render it without a cluster. */}}
{{- define "pfs.notes" -}}
pfs {{ .Chart.AppVersion }} is deployed: 1 Dask scheduler and {{ .Values.worker.replicas }} worker(s)
({{ .Values.worker.threads }} Dask threads, PFS_THREADS={{ .Values.worker.pfsThreads }} each).
{{- if .Values.sharedStorage.enabled }}
Workers mount the shared file system at {{ .Values.sharedStorage.mountPath }}{{ if .Values.sharedStorage.readOnly }} (read-only){{ end }}.
{{- if .Values.sharedStorage.readOnly }}
The mount is read-only: write manifests somewhere writable (an s3:// URL or a volume from worker.extraVolumes).
{{- end }}
{{- else }}
WARNING: sharedStorage.enabled is false: workers see no shared file system, only object stores (s3://, sftp://).
{{- end }}

In-cluster scheduler address: {{ include "pfs.schedulerAddress" . }}
                   (FQDN):   tcp://{{ include "pfs.schedulerFQDN" . }}:{{ .Values.scheduler.service.port }}

1. Connect from your machine:

   kubectl --namespace {{ .Release.Namespace }} port-forward svc/{{ include "pfs.schedulerName" . }} {{ .Values.scheduler.service.port }}:{{ .Values.scheduler.service.port }} {{ .Values.scheduler.service.dashboardPort }}:{{ .Values.scheduler.service.dashboardPort }}
   pfs info --scheduler tcp://localhost:{{ .Values.scheduler.service.port }}
   Dashboard: http://localhost:{{ .Values.scheduler.service.dashboardPort }}/status

   Paths are resolved on the workers: pass paths as the workers see them (e.g. {{ .Values.sharedStorage.mountPath }}/...).

2. Run a command inside the cluster:

   kubectl --namespace {{ .Release.Namespace }} run pfs-client --rm -it --restart=Never \
     --image={{ include "pfs.image" . }} --env=PFS_SCHEDULER={{ include "pfs.schedulerAddress" . }} -- \
     pfs scan {{ .Values.sharedStorage.mountPath }}/project -o {{ .Values.sharedStorage.mountPath }}/.pfs/manifests/project --no-progress
{{- if .Values.job.enabled }}

3. The Job runs: pfs {{ join " " .Values.job.args }}
   kubectl --namespace {{ .Release.Namespace }} logs -f job/{{ printf "%s-job-%d" (include "pfs.fullname" . | trunc 50 | trimSuffix "-") .Release.Revision }}
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
{{- end }}
{{- if .Values.networkPolicy.enabled }}

NetworkPolicy: only this release's workers, Job and Jupyter{{ if .Values.networkPolicy.extraIngress }} and networkPolicy.extraIngress peers{{ end }} reach the scheduler.
Clients outside that list (e.g. Airflow) must be added to networkPolicy.extraIngress.
{{- end }}
{{- end }}
