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
    # The daemon closes its pipes within 5 s of the stop, then lets calls in flight (a format, a
    # resize) finish for up to 60 s (its STOP_LIMIT) before it reports STOPPED: wait longer
    # than both, so an upgrade during a format does not throw before the binary is copied.
    # Stop-Service -NoWait: Stop-Service's own wait does not end on a timeout of ours.
    Stop-Service -Name $name -NoWait
    (Get-Service -Name $name).WaitForStatus('Stopped', '00:01:30')
}
Copy-Item -Force $Binary $exe

# The Event Log source the service writes its start, stop and failures under (Application log).
# .NET's EventLog.CreateEventSource adds the source's registry key
# (HKLM\SYSTEM\CurrentControlSet\Services\EventLog\Application\csi-proxy) with .NET's own
# message file, whose messages show the text the service writes as it is.
if (-not [System.Diagnostics.EventLog]::SourceExists('csi-proxy')) {
    [System.Diagnostics.EventLog]::CreateEventSource('csi-proxy', 'Application')
}

$daemonArgs = "-windows-service -kubelet-path=$KubeletPath -log_file=$LogFile -logtostderr=false"
if ($MetricsAddress) { $daemonArgs += " -metrics-bind-address=$MetricsAddress" }
function Invoke-Sc {
    & sc.exe @args | Out-Host
    if ($LASTEXITCODE -ne 0) { throw "sc.exe $($args -join ' ') failed with exit code $LASTEXITCODE" }
}
if (-not $existing) {
    Invoke-Sc create $name binPath= "`"$exe`" $daemonArgs" start= auto DisplayName= "CSI Proxy"
} else {
    Invoke-Sc config $name binPath= "`"$exe`" $daemonArgs"
}
# Restart after any failure, also on upgrade of an install made without these. The flag matters:
# the daemon reports SERVICE_STOPPED with a service-specific exit code when it fails, and without
# it the SCM runs the failure actions only for a service that ends without reporting STOPPED
# (SERVICE_FAILURE_ACTIONS_FLAG), so none of the failures the daemon reports would restart it.
Invoke-Sc failure $name reset= 0 actions= restart/10000
Invoke-Sc failureflag $name 1
# SERVICE_FAILURE_ACTIONS_FLAG: "The change takes effect the next time the system is started."
# Until this node reboots, the restart above applies only when the daemon's process ends without
# reporting STOPPED (a crash, a kill); a failure it reports (STOPPED with an exit code) is not
# restarted. `csi-proxy-ctl selftest` (row `recovery flag`) shows the flag as configured.
Write-Warning ("The recovery flag (sc.exe failureflag $name 1) acts from the next reboot; until then " +
    "the service is restarted only after a crash. Reboot the node to have reported failures restarted too.")
Start-Service -Name $name
Get-Service -Name $name
