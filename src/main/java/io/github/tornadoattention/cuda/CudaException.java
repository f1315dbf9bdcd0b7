package io.github.tornadoattention.cuda;

/** A CUDA driver call failed; the message carries the call and the CUresult name. */
public class CudaException extends RuntimeException {
    private final int result;
    private final String resultName;

    public CudaException(String call, int result, String resultName, String detail) {
        super(call + " failed: " + resultName + " (" + result + ")" + (detail == null || detail.isBlank() ? "" : ": " + detail));
        this.result = result;
        this.resultName = resultName;
    }

    /** The CUresult code. */
    public int result() {
        return result;
    }

    /** The CUresult's name, e.g. {@code CUDA_ERROR_OUT_OF_MEMORY}. */
    public String resultName() {
        return resultName;
    }
}
