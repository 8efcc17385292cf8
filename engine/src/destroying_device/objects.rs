//! Thin wrappers of the objects that need no bookkeeping.

use std::pin::Pin;

use wgpu::custom::{
    BindGroupInterface, BindGroupLayoutInterface, ComputePipelineInterface,
    DispatchBindGroupLayout, PipelineCacheInterface, PipelineLayoutInterface, QuerySetInterface,
    ShaderCompilationInfoFuture, ShaderModuleInterface,
};

#[derive(Debug)]
pub(super) struct ShaderModule(pub(super) wgpu::ShaderModule);

impl ShaderModuleInterface for ShaderModule {
    fn get_compilation_info(&self) -> Pin<Box<dyn ShaderCompilationInfoFuture>> {
        Box::pin(self.0.get_compilation_info())
    }
}

#[derive(Debug)]
pub(super) struct BindGroupLayout(pub(super) wgpu::BindGroupLayout);
impl BindGroupLayoutInterface for BindGroupLayout {}

#[derive(Debug)]
pub(super) struct BindGroup(pub(super) wgpu::BindGroup);
impl BindGroupInterface for BindGroup {}

#[derive(Debug)]
pub(super) struct PipelineLayout(pub(super) wgpu::PipelineLayout);
impl PipelineLayoutInterface for PipelineLayout {}

#[derive(Debug)]
pub(super) struct ComputePipeline(pub(super) wgpu::ComputePipeline);

impl ComputePipelineInterface for ComputePipeline {
    fn get_bind_group_layout(&self, index: u32) -> DispatchBindGroupLayout {
        DispatchBindGroupLayout::custom(BindGroupLayout(self.0.get_bind_group_layout(index)))
    }
}

#[derive(Debug)]
pub(super) struct PipelineCache(pub(super) wgpu::PipelineCache);

impl PipelineCacheInterface for PipelineCache {
    fn get_data(&self) -> Option<Vec<u8>> {
        self.0.get_data()
    }
}

#[derive(Debug)]
pub(super) struct QuerySet(pub(super) wgpu::QuerySet);

impl QuerySetInterface for QuerySet {
    fn destroy(&self) {
        self.0.destroy();
    }
}
