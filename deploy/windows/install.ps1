# Installs or upgrades csi-proxy as the Windows service `csiproxy` (upstream's service name).
# Run as Administrator:  .\install.ps1 -Binary .\csi-proxy.exe [-MetricsAddress 127.0.0.1:8888]
# Upgrade in place: run it again with the new binary; the service is stopped, the file replaced,
# and the service started again (every pipe closes within 5 s of the stop).
param(
    [Parameter(Mandatory = $true)][string]$Binary,
    [string]$InstallDir = 'C:\etc\kubernetes\node\bin',
    [string]$LogFile = 'C:\etc\kubernetes\logs\csi-proxy.log',
    [string]$KubeletPath = 'C:\var\lib\kubelet',
    [string]$MetricsAddress = ''
)
$ErrorActionPreference = 'Stop'
$name = 'csiproxy'
$exe = Join-Path $InstallDir 'csi-proxy.exe'
New-Item -ItemType Directory -Force -Path $InstallDir, (Split-Path $LogFile) | Out-Null

$existing = Get-Service -Name $name -ErrorAction SilentlyContinue
if ($existing -and $existing.Status -ne 'Stopped') {
    Stop-Service -Name $name
    (Get-Service -Name $name).WaitForStatus('Stopped', '00:00:30')
}
Copy-Item -Force $Binary $exe

# The Event Log source the service writes its start, stop and failures under (Application log).
# .NET's EventLog.CreateEventSource adds the source's registry key
# (HKLM\SYSTEM\CurrentControlSet\Services\EventLog\Application\csi-proxy) with .NET's own
# message file, whose messages show the text the service writes as it is.
if (-not [System.Diagnostics.EventLog]::SourceExists('csi-proxy')) {
    [System.Diagnostics.EventLog]::CreateEventSource('csi-proxy', 'Application')
}

$args = "-windows-service -kubelet-path=$KubeletPath -log_file=$LogFile -logtostderr=false"
if ($MetricsAddress) { $args += " -metrics-bind-address=$MetricsAddress" }
if (-not $existing) {
    & sc.exe create $name binPath= "`"$exe`" $args" start= auto DisplayName= "CSI Proxy" | Out-Host
    & sc.exe failure $name reset= 0 actions= restart/10000 | Out-Host
} else {
    & sc.exe config $name binPath= "`"$exe`" $args" | Out-Host
}
if ($LASTEXITCODE -ne 0) { throw "sc.exe failed with exit code $LASTEXITCODE" }
Start-Service -Name $name
Get-Service -Name $name
