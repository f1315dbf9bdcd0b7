package io.github.tornadoattention;

/** The chosen backend cannot run on this machine (missing runtime, driver or device). */
public class BackendUnavailableException extends RuntimeException {
    private final String backendId;

    public BackendUnavailableException(String backendId, String reason) {
        super("backend " + backendId + " is unavailable: " + reason);
        this.backendId = backendId;
    }

    public String backendId() {
        return backendId;
    }
}
