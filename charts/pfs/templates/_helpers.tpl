{{/* Chart name. */}}
{{- define "pfs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-<chart>, or the release name when it already contains the chart name. */}}
{{- define "pfs.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "pfs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pfs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pfs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pfs.labels" -}}
helm.sh/chart: {{ include "pfs.chart" . }}
{{ include "pfs.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pfs
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels and selector labels for one component: include "pfs.componentLabels" (list . "worker") */}}
{{- define "pfs.componentLabels" -}}
{{- $ctx := index . 0 -}}
{{ include "pfs.labels" $ctx }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "pfs.componentSelectorLabels" -}}
{{- $ctx := index . 0 -}}
{{ include "pfs.selectorLabels" $ctx }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "pfs.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pfs.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "pfs.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{- define "pfs.schedulerName" -}}
{{- printf "%s-scheduler" (include "pfs.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* In-cluster scheduler address, e.g. tcp://rel-pfs-scheduler:8786 */}}
{{- define "pfs.schedulerAddress" -}}
{{- printf "tcp://%s:%v" (include "pfs.schedulerName" .) .Values.scheduler.service.port }}
{{- end }}

{{- define "pfs.schedulerFQDN" -}}
{{- printf "%s.%s.svc.%s" (include "pfs.schedulerName" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* Pod-spec fields shared by every pod. */}}
{{- define "pfs.podCommon" -}}
serviceAccountName: {{ include "pfs.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* Environment shared by every pfs/dask container. */}}
{{- define "pfs.commonEnv" -}}
- name: HOME
  value: /tmp
- name: DASK_TEMPORARY_DIRECTORY
  value: {{ .Values.scratch.localDirectory | quote }}
- name: PFS_THREADS
  value: {{ .Values.worker.pfsThreads | quote }}
{{- /* Dask's profiler samples every thread 100 times a second: CPU the storage client needs,
       and a worker deadlock on CPython < 3.11.9 (gh-106883); see dask_pfs/cluster.py. */}}
- name: DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED
  value: "False"
{{- /* Each batched stream keeps its last 1,000 message batches, scan tasks' directories included:
       ~100 MB per worker on the scheduler; see dask_pfs/cluster.py. */}}
- name: DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH
  value: "20"
{{- end }}

{{/* Scratch volumes (read-only root file system). */}}
{{- define "pfs.scratchVolumes" -}}
{{- $ed := dict }}
{{- if .Values.scratch.medium }}{{- $_ := set $ed "medium" .Values.scratch.medium }}{{- end }}
{{- if .Values.scratch.sizeLimit }}{{- $_ := set $ed "sizeLimit" .Values.scratch.sizeLimit }}{{- end }}
- name: tmp
  emptyDir: {{- toYaml $ed | nindent 4 }}
- name: dask-local
  emptyDir: {{- toYaml $ed | nindent 4 }}
{{- end }}

{{- define "pfs.scratchMounts" -}}
- name: tmp
  mountPath: /tmp
- name: dask-local
  mountPath: {{ .Values.scratch.localDirectory }}
{{- end }}

{{- define "pfs.sharedVolume" -}}
{{- with .Values.sharedStorage }}
{{- if .enabled }}
- name: shared
{{- if eq .type "existingClaim" }}
  persistentVolumeClaim:
    claimName: {{ required "sharedStorage.existingClaim is required when sharedStorage.type is existingClaim" .existingClaim }}
    readOnly: {{ .readOnly }}
{{- else }}
  hostPath:
    path: {{ required "sharedStorage.hostPath is required when sharedStorage.type is hostPath" .hostPath }}
    type: {{ .hostPathType | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "pfs.sharedMount" -}}
{{- with .Values.sharedStorage }}
{{- if .enabled }}
- name: shared
  mountPath: {{ .mountPath }}
  readOnly: {{ .readOnly }}
{{- with .subPath }}
  subPath: {{ . }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Scheduling fields for one component's values: include "pfs.scheduling" .Values.worker */}}
{{- define "pfs.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "pfs.podMetadata" -}}
{{- $ctx := index . 0 -}}
{{- with $ctx.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
labels:
  {{- include "pfs.componentSelectorLabels" . | nindent 2 }}
  {{- with $ctx.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
