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

{{/* Dask protocol: tls (mutual TLS, the default) or tcp. */}}
{{- define "pfs.protocol" -}}
{{- ternary "tls" "tcp" (and .Values.tls.enabled true) }}
{{- end }}

{{/* In-cluster scheduler address, e.g. tls://rel-pfs-scheduler:8786 */}}
{{- define "pfs.schedulerAddress" -}}
{{- printf "%s://%s:%v" (include "pfs.protocol" .) (include "pfs.schedulerName" .) .Values.scheduler.service.port }}
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
{{- define "pfs.baseEnv" -}}
- name: HOME
  value: /tmp
- name: DASK_TEMPORARY_DIRECTORY
  value: {{ .Values.scratch.localDirectory | quote }}
{{- /* Dask's profiler samples every thread 100 times a second: CPU the storage client needs,
       and a worker deadlock on CPython < 3.11.9 (gh-106883); see dask_pfs/clusters/client.py. */}}
- name: DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED
  value: "False"
{{- /* Each batched stream keeps its last 1,000 message batches, scan tasks' directories included:
       ~100 MB per worker on the scheduler; see dask_pfs/clusters/client.py. */}}
- name: DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH
  value: "20"
{{- end }}

{{/* ... plus pfs's I/O threads, for the containers that run pfs code (not the scheduler: tuning the workers
     must not change, and so restart, the scheduler's pod). */}}
{{- define "pfs.commonEnv" -}}
{{ include "pfs.baseEnv" . }}
- name: PFS_THREADS
  value: {{ .Values.worker.pfsThreads | default "auto" | quote }}
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

{{/* Job name: the hash of its pod template, so an upgrade that leaves the Job alone leaves its run alone
     (a Job's template is immutable: any change needs a new Job, which the new name gives). */}}
{{- define "pfs.jobName" -}}
{{- printf "%s-job-%s" (include "pfs.fullname" . | trunc 48 | trimSuffix "-") (include "pfs.jobPodTemplate" . | sha256sum | trunc 8) }}
{{- end }}

{{/* --- TLS: Secrets, volumes and environment (templates/tls-secrets.yaml creates the generated ones) --- */}}

{{/* Secret for the scheduler and workers (keys ca.crt, tls.crt, tls.key). */}}
{{- define "pfs.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "pfs.fullname" .) | trunc 63 | trimSuffix "-") .Values.tls.existingSecret }}
{{- end }}

{{/* Secret for clients: the Job, Jupyter, Airflow, your laptop. */}}
{{- define "pfs.tlsClientSecretName" -}}
{{- if .Values.tls.existingSecret }}
{{- default .Values.tls.existingSecret .Values.tls.existingClientSecret }}
{{- else }}
{{- printf "%s-tls-client" (include "pfs.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The generated certificates, made once per render and kept across upgrades: the Secrets in the cluster are
     looked up and reused; a missing client certificate is re-issued by the kept CA. Sets .Values.tls._generated
     to a dict of base64 values: ca.crt, ca.key, server.crt, server.key, client.crt, client.key. */}}
{{- define "pfs.tlsGenerate" -}}
{{- if not (hasKey .Values.tls "_generated") }}
{{- $days := int .Values.tls.validityDays }}
{{- $server := (lookup "v1" "Secret" .Release.Namespace (include "pfs.tlsSecretName" .)).data | default dict }}
{{- $client := (lookup "v1" "Secret" .Release.Namespace (include "pfs.tlsClientSecretName" .)).data | default dict }}
{{- $m := dict }}
{{- $ca := dict }}
{{- if and (hasKey $server "ca.crt") (hasKey $server "ca.key") (hasKey $server "tls.crt") (hasKey $server "tls.key") }}
{{- $ca = buildCustomCert (index $server "ca.crt") (index $server "ca.key") }}
{{- $_ := set $m "server.crt" (index $server "tls.crt") }}
{{- $_ := set $m "server.key" (index $server "tls.key") }}
{{- else }}
{{- $ca = genCA (printf "%s-ca" (include "pfs.fullname" .)) $days }}
{{- $sched := include "pfs.schedulerName" . }}
{{- $names := list $sched (printf "%s.%s" $sched .Release.Namespace) (printf "%s.%s.svc" $sched .Release.Namespace) (include "pfs.schedulerFQDN" .) "localhost" }}
{{- $cert := genSignedCert (printf "%s-cluster" (include "pfs.fullname" .)) (list "127.0.0.1") $names $days $ca }}
{{- $_ := set $m "server.crt" ($cert.Cert | b64enc) }}
{{- $_ := set $m "server.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set $m "ca.crt" ($ca.Cert | b64enc) }}
{{- $_ := set $m "ca.key" ($ca.Key | b64enc) }}
{{- if and (hasKey $client "tls.crt") (hasKey $client "tls.key") (eq (index $client "ca.crt" | default "") (index $m "ca.crt")) }}
{{- $_ := set $m "client.crt" (index $client "tls.crt") }}
{{- $_ := set $m "client.key" (index $client "tls.key") }}
{{- else }}
{{- $cert := genSignedCert (printf "%s-client" (include "pfs.fullname" .)) nil nil $days $ca }}
{{- $_ := set $m "client.crt" ($cert.Cert | b64enc) }}
{{- $_ := set $m "client.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values.tls "_generated" $m }}
{{- end }}
{{- end }}

{{/* The TLS volume of one pod: include "pfs.tlsVolume" (list . "server"|"client") */}}
{{- define "pfs.tlsVolume" -}}
{{- $ctx := index . 0 -}}
{{- if $ctx.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ ternary (include "pfs.tlsSecretName" $ctx) (include "pfs.tlsClientSecretName" $ctx) (eq (index . 1) "server") }}
    {{- /* never ca.key: pods get the CA certificate, their own certificate and key */}}
    items:
      - key: ca.crt
        path: ca.crt
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- end }}

{{- define "pfs.tlsMount" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: {{ .Values.tls.mountPath }}
  readOnly: true
{{- end }}
{{- end }}

{{/* `dask scheduler` / `dask worker` arguments: listen and connect with tls:// and this pod's certificate. */}}
{{- define "pfs.tlsArgs" -}}
{{- if .Values.tls.enabled }}
- --tls-ca-file
- {{ printf "%s/ca.crt" .Values.tls.mountPath | quote }}
- --tls-cert
- {{ printf "%s/tls.crt" .Values.tls.mountPath | quote }}
- --tls-key
- {{ printf "%s/tls.key" .Values.tls.mountPath | quote }}
{{- end }}
{{- end }}

{{/* Dask's client configuration (pfs reads it too when no --tls-* option is given): certificates mounted at
     tls.mountPath, and no unencrypted connection accepted or made. */}}
{{- define "pfs.tlsClientEnv" -}}
{{- if .Values.tls.enabled }}
- name: DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION
  value: "True"
- name: DASK_DISTRIBUTED__COMM__TLS__CA_FILE
  value: {{ printf "%s/ca.crt" .Values.tls.mountPath | quote }}
- name: DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT
  value: {{ printf "%s/tls.crt" .Values.tls.mountPath | quote }}
- name: DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY
  value: {{ printf "%s/tls.key" .Values.tls.mountPath | quote }}
{{- end }}
{{- end }}

{{/* The Job's pod template; its hash names the Job (pfs.jobName). */}}
{{- define "pfs.jobPodTemplate" -}}
{{- $comp := list . "job" -}}
metadata:
  {{- with (include "pfs.podMetadata" $comp | trim) }}{{ . | nindent 2 }}{{- end }}
  {{- with .Values.job.runId }}
  annotations:
    pfs.io/run-id: {{ . | quote }}
  {{- end }}
spec:
  restartPolicy: Never
  {{- with (include "pfs.podCommon" . | trim) }}{{ . | nindent 2 }}{{- end }}
  {{- with (include "pfs.scheduling" .Values.job | trim) }}{{ . | nindent 2 }}{{- end }}
  containers:
    - name: pfs
      image: {{ include "pfs.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["pfs"]
      args:
        {{- range .Values.job.args }}
        - {{ . | quote }}
        {{- end }}
      env:
        - name: PFS_SCHEDULER
          value: {{ include "pfs.schedulerAddress" . | quote }}
        - name: DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT
          value: {{ .Values.job.connectTimeout | quote }}
        {{- with (include "pfs.commonEnv" . | trim) }}{{ . | nindent 8 }}{{- end }}
        {{- with (include "pfs.tlsClientEnv" . | trim) }}{{ . | nindent 8 }}{{- end }}
        {{- with .Values.job.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      resources:
        {{- toYaml .Values.job.resources | nindent 8 }}
      volumeMounts:
        {{- with (include "pfs.scratchMounts" . | trim) }}{{ . | nindent 8 }}{{- end }}
        {{- with (include "pfs.tlsMount" . | trim) }}{{ . | nindent 8 }}{{- end }}
        {{- with (include "pfs.sharedMount" . | trim) }}{{ . | nindent 8 }}{{- end }}
  volumes:
    {{- with (include "pfs.scratchVolumes" . | trim) }}{{ . | nindent 4 }}{{- end }}
    {{- with (include "pfs.tlsVolume" (list . "client") | trim) }}{{ . | nindent 4 }}{{- end }}
    {{- with (include "pfs.sharedVolume" . | trim) }}{{ . | nindent 4 }}{{- end }}
{{- end }}
