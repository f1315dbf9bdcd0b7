/* NVML stand-in for tools/fakecuda: TornadoVM's PTX driver asks NVML for power readings. */
typedef struct nvmlDevice_st *nvmlDevice_t;
int nvmlInit(void) { return 0; }
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { *d = 0; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { *d = 0; return 0; }
int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) { *mw = 0; return 0; }
